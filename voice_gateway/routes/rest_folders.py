"""Folders and files: CRUD, uploads (processed in the background: voice_gateway/file_jobs.py),
attaching folders to agents (docs/rest_api.md, "Folders and files")."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from memory.files import FolderData, unique_name
from memory.ingest import UnsupportedFile, file_type
from memory.models import Conflict
from voice_gateway.errors import ApiError
from voice_gateway.file_jobs import FileJobs
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta_sources import FolderIn, FolderUpdate, file_json, folder_json
from voice_gateway.routes import rest_open_files, rest_sources
from voice_gateway.routes.agent_state import agent_out
from voice_gateway.routes.http import paginate, parse_body, query_bool, query_choice, query_int
from voice_gateway.routes.rest_archives import embedding_handle

DUPLICATES = ("suffix", "error", "skip", "replace")


def jobs(request: Request) -> FileJobs:
    return gateway_of(request).file_jobs


async def _folder(request: Request) -> FolderData:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    folder: FolderData = await gw.memory.folders.get(
        request.path_params["folder_id"], p.user_id, scoped=p.scoped
    )
    return folder


async def create_folder(request: Request) -> JSONResponse:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, FolderIn)
    handle = embedding_handle(request, body.embedding, body.embedding_config)
    folder = await gw.memory.folders.create(
        p.user_id,
        body.name,
        handle,
        description=body.description,
        instructions=body.instructions,
        chunk_size=body.embedding_chunk_size,
        metadata=body.metadata,
    )
    return JSONResponse(folder_json(folder))


async def list_folders(request: Request) -> JSONResponse:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    rows = await gw.memory.folders.page(
        p.user_id,
        scoped=p.scoped,
        name=q.get("name"),
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        before=q.get("before"),
        desc=query_choice(request, "order", ("asc", "desc"), "asc") == "desc",
    )
    return JSONResponse([folder_json(f) for f in rows])


async def get_folder(request: Request) -> JSONResponse:
    return JSONResponse(folder_json(await _folder(request)))


async def update_folder(request: Request) -> JSONResponse:
    folder = await _folder(request)
    body = await parse_body(request, FolderUpdate)
    fields = {k: v for k, v in body.model_dump(exclude_unset=True).items() if k != "name" or v}
    updated = await gateway_of(request).memory.folders.update(folder.id, **fields)
    return JSONResponse(folder_json(updated))


async def delete_folder(request: Request) -> JSONResponse:
    """Delete a folder with its files (detached from its agents first)."""
    gw = gateway_of(request)
    folder = await _folder(request)
    for agent_id in await gw.memory.folders.delete(folder.id):
        gw.loop.prompts.forget(agent_id)
    return JSONResponse(None)


async def upload_file(request: Request) -> JSONResponse:
    """Upload one file (multipart field `file`); it is processed in the background: poll
    `processing_status`. Over the size limit: 413; an unknown type: 415."""
    gw = gateway_of(request)
    folder = await _folder(request)
    mode = query_choice(request, "duplicate_handling", DUPLICATES, "suffix")
    limit = gw.settings.max_file_bytes
    async with request.form(max_files=1, max_fields=10) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(422, "multipart field 'file' (a file) is required")
        if upload.size is not None and upload.size > limit:
            raise ApiError(413, f"file over the limit of {limit} bytes")
        data = await upload.read(limit + 1)
        uploaded = PurePosixPath((upload.filename or "").replace("\\", "/")).name
    if len(data) > limit:
        raise ApiError(413, f"file over the limit of {limit} bytes")
    name = file_name(request.query_params.get("name") or uploaded)
    if not name:
        raise ApiError(422, "the file needs a name")
    try:
        kind = await asyncio.to_thread(file_type, name, data)
    except UnsupportedFile as exc:
        raise ApiError(415, str(exc)) from exc
    original = name
    taken = await gw.memory.files.names(folder.id)
    existing = await gw.memory.files.by_original(folder.id, original) or taken.get(name)
    if existing is not None:
        if mode == "error":
            raise Conflict(f"a file named '{name}' already exists in the folder")
        if mode == "skip":
            return JSONResponse(file_json(await gw.memory.files.get(existing)))
        if mode == "replace":
            await _delete_file(request, existing, folder.id)
            taken = await gw.memory.files.names(folder.id)
    if name in taken:
        name = unique_name(name, taken)
    record = await gw.memory.files.add(folder, name, kind, len(data), original)
    worker = jobs(request)
    await worker.recover()  # uploads a stopped gateway left unfinished: "error"
    worker.submit(folder, record, data)
    return JSONResponse(file_json(record))


def file_name(given: str) -> str:
    """A file's name in its folder: a name given with the upload may be a path ("a/b/c.txt",
    as in Letta); empty, "." and ".." parts are dropped (a name is never a path on disk)."""
    parts = [p.strip() for p in given.replace("\\", "/").split("/")]
    return "/".join(p for p in parts if p not in ("", ".", ".."))[:300]


async def list_files(request: Request) -> JSONResponse:
    gw = gateway_of(request)
    folder = await _folder(request)
    rows = await gw.memory.files.page(
        folder.id,
        limit=query_int(request, "limit", 100),
        after=request.query_params.get("after"),
        desc=query_choice(request, "order", ("asc", "desc"), "asc") == "desc",
    )
    content = query_bool(request, "include_content", False)
    return JSONResponse([file_json(f, content=content) for f in rows])


async def get_file(request: Request) -> JSONResponse:
    folder = await _folder(request)
    f = await gateway_of(request).memory.files.get(request.path_params["file_id"], folder.id)
    return JSONResponse(file_json(f, content=query_bool(request, "include_content", False)))


async def _delete_file(request: Request, file_id: str, folder_id: str) -> None:
    gw = gateway_of(request)
    for agent_id in await gw.memory.files.delete(file_id, folder_id):
        gw.loop.prompts.forget(agent_id)
    gw.memory.archival.forget(await gw.memory.folders.archive_id(folder_id))


async def delete_file(request: Request) -> Response:
    folder = await _folder(request)
    await _delete_file(request, request.path_params["file_id"], folder.id)
    return Response(status_code=204)


async def folder_agents(request: Request) -> JSONResponse:
    """The ids of the agents the folder is attached to."""
    folder = await _folder(request)
    return JSONResponse(await gateway_of(request).memory.folders.agent_ids(folder.id))


async def agent_folders(request: Request) -> JSONResponse:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    folders = [folder_json(f) for f in await gw.memory.folders.agent_folders(agent.id)]
    return JSONResponse(paginate(request, folders))


async def _set_attached(request: Request, attached: bool) -> JSONResponse:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    folder = await _folder(request)
    await gw.memory.folders.set_attached(agent.id, folder.id, attached)
    gw.loop.prompts.forget(agent.id)
    return JSONResponse(await agent_out(request, await gw.memory.agents.get(agent.id)))


async def attach_folder(request: Request) -> JSONResponse:
    """Attach a folder: the agent gets the file tools (open_files, grep_files,
    semantic_search_files) and the folder's newest files open in its context."""
    return await _set_attached(request, True)


async def detach_folder(request: Request) -> JSONResponse:
    return await _set_attached(request, False)


def _family(folders: str, agents: str, noun: str) -> list[BaseRoute]:
    """One family's routes: folders, or Letta's older name for them, sources (the same
    store, the same ids); `noun` names the operations."""
    f = folders + "/{folder_id}"
    ns = "folders" if noun == "folder" else "sources"
    src = "" if noun == "folder" else "_source"  # upload_file, upload_source_file...

    def r(
        path: str, endpoint: Callable[[Request], Awaitable[Response]], method: str, op: str
    ) -> Route:
        return Route(path, endpoint, methods=[method], name=op.format(n=noun, ns=ns, src=src))

    return [
        r(folders, create_folder, "POST", "create_{n}"),
        r(folders + "/", create_folder, "POST", "create_{n}"),
        r(folders, list_folders, "GET", "list_{ns}"),
        r(folders + "/", list_folders, "GET", "list_{ns}"),
        r(f, get_folder, "GET", "get_{n}"),
        r(f, update_folder, "PATCH", "update_{n}"),
        r(f, delete_folder, "DELETE", "delete_{n}"),
        r(f"{f}/upload", upload_file, "POST", "upload{src}_file"),
        r(f"{f}/files", list_files, "GET", "list{src}_files"),
        r(f"{f}/files/{{file_id}}", get_file, "GET", "get{src}_file"),
        r(f"{f}/agents", folder_agents, "GET", "{n}_agents"),
        r(f"{f}/{{file_id}}", delete_file, "DELETE", "delete{src}_file"),
        r(agents, agent_folders, "GET", "agent_{ns}"),
        r(f"{agents}/attach/{{folder_id}}", attach_folder, "PATCH", "attach_{n}"),
        r(f"{agents}/detach/{{folder_id}}", detach_folder, "PATCH", "detach_{n}"),
    ]


def routes() -> list[BaseRoute]:
    return [
        *_family("/v1/folders", "/v1/agents/{agent_id}/folders", "folder"),
        *rest_sources.routes(),  # before /v1/sources/{folder_id}: count, metadata, name/...
        *_family("/v1/sources", "/v1/agents/{agent_id}/sources", "source"),
        *rest_open_files.routes(),  # the agent's files, open or closed
    ]
