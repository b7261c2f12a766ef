"""OpenAPI operations of archives, passages search, folders and files (merged into the
document by openapi.py, like the table in openapi_schemas.py)."""

from __future__ import annotations

from voice_gateway.protocol.letta_sources import (
    ArchiveIn,
    ArchivePassageIn,
    ArchivePassagesIn,
    ArchiveUpdate,
    FolderIn,
    FolderUpdate,
    PassageSearchIn,
)
from voice_gateway.routes.openapi_schemas import (
    BOOL,
    CURSORS,
    NSTR,
    OBJ,
    ORDER,
    STR,
    Op,
    Schema,
    arr,
    limit,
    obj,
    q,
    ref,
)

INT_OR_NULL: Schema = {"type": ["integer", "null"]}
SOURCE_RESPONSES: dict[str, Schema] = {
    "Archive": obj(
        {"id": STR, "name": STR, "created_at": STR, "embedding_config": OBJ},
        {"description": NSTR, "metadata": OBJ, "vector_db_provider": STR},
    ),
    "Folder": obj(
        {"id": STR, "name": STR, "embedding_config": OBJ},
        {"description": NSTR, "instructions": NSTR, "metadata": OBJ},
    ),
    "FileMetadata": obj(
        {"id": STR, "source_id": STR, "file_name": STR, "processing_status": STR},
        {"total_chunks": INT_OR_NULL, "chunks_embedded": INT_OR_NULL, "error_message": NSTR},
    ),
    "ArchivePassage": obj({"id": STR, "text": STR}, {"archive_id": NSTR, "tags": arr(STR)}),
    "PassageSearchItem": obj({"passage": ref("ArchivePassage"), "score": {"type": "number"}}),
}
NULL: Schema = {"type": "null"}
PAGE = (*CURSORS, limit(), ORDER)

SOURCE_OPS: dict[tuple[str, str], Op] = {
    ("create_archive", "post"): Op(ArchiveIn, response=ref("Archive")),
    ("list_archives", "get"): Op(
        query=(*PAGE, q("name", STR), q("agent_id", STR)), response=arr(ref("Archive"))
    ),
    ("get_archive", "get"): Op(response=ref("Archive")),
    ("update_archive", "patch"): Op(ArchiveUpdate, response=ref("Archive")),
    ("delete_archive", "delete"): Op(status=204, media=()),
    ("add_archive_passage", "post"): Op(ArchivePassageIn, response=ref("ArchivePassage")),
    ("add_archive_passages", "post"): Op(ArchivePassagesIn, response=arr(ref("ArchivePassage"))),
    ("delete_archive_passage", "delete"): Op(status=204, media=()),
    ("attach_archive", "patch"): Op(response=NULL),
    ("detach_archive", "patch"): Op(response=NULL),
    ("search_all_passages", "post"): Op(PassageSearchIn, response=arr(ref("PassageSearchItem"))),
    ("create_folder", "post"): Op(FolderIn, response=ref("Folder")),
    ("list_folders", "get"): Op(query=(*PAGE, q("name", STR)), response=arr(ref("Folder"))),
    ("get_folder", "get"): Op(response=ref("Folder")),
    ("update_folder", "patch"): Op(FolderUpdate, response=ref("Folder")),
    ("delete_folder", "delete"): Op(response=NULL),
    ("upload_file", "post"): Op(
        query=(
            q("duplicate_handling", {"enum": ["suffix", "error", "skip", "replace"]}),
            q("name", STR),
        ),
        response=ref("FileMetadata"),
        also=(),
    ),
    ("list_files", "get"): Op(
        query=(q("after", STR), limit(), ORDER, q("include_content", BOOL)),
        response=arr(ref("FileMetadata")),
    ),
    ("get_file", "get"): Op(query=(q("include_content", BOOL),), response=ref("FileMetadata")),
    ("delete_file", "delete"): Op(status=204, media=()),
    ("folder_agents", "get"): Op(response=arr(STR)),
    ("agent_folders", "get"): Op(query=PAGE, response=arr(ref("Folder"))),
    ("attach_folder", "patch"): Op(response=ref("Agent")),
    ("detach_folder", "patch"): Op(response=ref("Agent")),
    # an agent's files, open or closed (routes/rest_open_files.py)
    ("list_agent_files", "get"): Op(
        query=(
            *CURSORS,
            q("cursor", STR),
            limit(),
            ORDER,
            q("order_by", {"enum": ["created_at"]}),
            q("is_open", BOOL),
        ),
        response=obj({"files": arr(OBJ), "has_more": BOOL}, {"next_cursor": NSTR}),
    ),
    ("open_agent_file", "patch"): Op(response=arr(STR)),
    ("close_agent_file", "patch"): Op(response=obj({"message": STR})),
    ("close_all_agent_files", "patch"): Op(response=arr(STR)),
    # agent files (routes/rest_agent_files.py): the file is the multipart field `file`
    ("export_agent", "get"): Op(
        query=(
            q("conversation_id", STR),
            q("scrub_messages", BOOL),
            q("use_legacy_format", BOOL),
            q("max_steps", {"type": "integer"}),
        ),
        response=OBJ,
    ),
    ("import_agent", "post"): Op(response=obj({"agent_ids": arr(STR)})),
}

# Letta's older name of folders, sources: the same operations (routes/rest_folders.py), and
# the reads only sources have (routes/rest_sources.py)
SOURCE_ALIASES = {
    "create_source": "create_folder",
    "list_sources": "list_folders",
    "get_source": "get_folder",
    "update_source": "update_folder",
    "delete_source": "delete_folder",
    "upload_source_file": "upload_file",
    "list_source_files": "list_files",
    "get_source_file": "get_file",
    "delete_source_file": "delete_file",
    "source_agents": "folder_agents",
    "agent_sources": "agent_folders",
    "attach_source": "attach_folder",
    "detach_source": "detach_folder",
}
SOURCE_OPS.update(
    {
        (alias, m): op
        for (name, m), op in list(SOURCE_OPS.items())
        for alias, of in SOURCE_ALIASES.items()
        if of == name
    }
)
SOURCE_OPS.update(
    {
        ("count_sources", "get"): Op(response={"type": "integer"}),
        ("source_id_by_name", "get"): Op(response=STR),
        ("sources_metadata", "get"): Op(
            query=(q("include_detailed_per_source_metadata", BOOL),),
            response=obj(
                {
                    "total_sources": {"type": "integer"},
                    "total_files": {"type": "integer"},
                    "total_size": {"type": "integer"},
                    "sources": arr(OBJ),
                }
            ),
        ),
    }
)
