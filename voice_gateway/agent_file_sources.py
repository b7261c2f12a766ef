"""The sources (folders) and files of an agent file, planned for import: folder names,
embeddings and chunk sizes, each file's name, type and text, and which files each agent has
attached and open (the window of lines it showed). Checked here, before anything is written;
the text is chunked and embedded again after the import (docs/rest_api.md "Agent files")."""

from __future__ import annotations

from pathlib import PurePosixPath

from memory.agent_import import FilePlan, FolderPlan, OpenPlan
from memory.embeddings import validate_handle
from memory.ingest import TYPES
from memory.open_files import window
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway
from voice_gateway.protocol.agent_file import AgentFile, AgentIn, SourceIn

DEFAULT_CHUNK = 800
NO_TEXT = "the agent file carried no text for this file"


def _embedding(gw: Gateway, override: str | None, src: SourceIn) -> str:
    if override is not None:
        return override  # checked with the agents' embedding
    cfg = src.embedding_config
    handle = src.embedding or (cfg.handle if cfg else None)
    try:  # the file's own: a handle this server lacks falls back to the default
        validate_handle(handle or "")
        return str(handle)
    except ValueError:
        return str(gw.settings.default_embedding)


def _chunk_size(src: SourceIn) -> int:
    size = src.embedding_chunk_size
    if size is None and src.embedding_config is not None:
        found = getattr(src.embedding_config, "embedding_chunk_size", None)
        size = found if isinstance(found, int) and not isinstance(found, bool) else None
    return max(100, min(size or DEFAULT_CHUNK, 8000))


def folder_plans(gw: Gateway, af: AgentFile, embedding: str | None) -> list[FolderPlan]:
    return [
        FolderPlan(
            key=src.id,
            name=src.name,
            embedding=_embedding(gw, embedding, src),
            chunk_size=_chunk_size(src),
            description=src.description,
            instructions=src.instructions,
            metadata=dict(src.metadata or {}),
        )
        for src in af.sources
    ]


def file_plans(af: AgentFile) -> list[FilePlan]:
    out: list[FilePlan] = []
    for n, f in enumerate(af.files):
        name = PurePosixPath(f.file_name.replace("\\", "/")).name.strip()[:300]
        if name in ("", ".", ".."):
            raise ApiError(422, f"agent file: files.{n}.file_name: not a file name")
        kind = f.file_type or TYPES.get(PurePosixPath(name).suffix.lower(), "text/plain")
        text = f.content.replace("\r\n", "\n") if f.content is not None else None
        size = f.file_size if f.file_size is not None else len((text or "").encode())
        error = None if text is not None else (f.error_message or NO_TEXT)
        out.append(FilePlan(f.id, f.source_id, name, kind[:100], size, text, error))
    return out


def agent_sources(a: AgentIn, files: list[FilePlan]) -> tuple[list[str], list[OpenPlan]]:
    """The agent's folders (file ids) and its open files: the same window of lines again,
    computed from the file's text (a file without text cannot be open)."""
    text_of = {f.key: f.content for f in files}
    opened: list[OpenPlan] = []
    for fa in a.files_agents:
        content = text_of.get(fa.file_id)
        if not fa.is_open or content is None:
            continue
        offset = (fa.start_line - 1) if fa.start_line else None
        length = None
        if fa.start_line and fa.end_line and fa.end_line >= fa.start_line:
            length = fa.end_line - fa.start_line + 1
        if (fa.visible_content or "").startswith("[Viewing file start"):
            offset = length = None  # Letta's window from the start, not a range asked for
        text, first, last = window(content, offset, length)
        opened.append(OpenPlan(fa.file_id, text, first, last, fa.last_accessed_at))
    return list(a.source_ids or []), opened
