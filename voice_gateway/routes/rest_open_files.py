"""An agent's files (Letta's `client.agents.files`): the files of the folders attached to it,
open or closed, and opening or closing them by hand. The state is the one the `open_files`
tool keeps (memory/open_files.py): an open file is a window of its numbered lines in the
agent's context, at most `max_files_open` at once, the least recently used closing first."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.models import AgentData, NotFound
from memory.open_files import AgentFile, OpenFiles, max_open, window_chars
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import iso
from voice_gateway.routes.http import query_bool, query_choice, query_int


def _json(f: AgentFile) -> dict[str, Any]:
    return {
        "id": f.id,
        "file_id": f.file_id,
        "file_name": f.file_name,
        "folder_id": f.folder_id,
        "folder_name": f.folder_name,
        "is_open": f.is_open,
        "visible_content": f.visible_content,
        "start_line": f.start_line,
        "end_line": f.end_line,
        "last_accessed_at": iso(f.last_accessed_at) if f.last_accessed_at else None,
    }


async def _agent_files(request: Request) -> tuple[AgentData, OpenFiles, list[AgentFile]]:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    store = OpenFiles(gw.memory.db)
    return agent, store, await store.listing(agent.id)


def _one(files: list[AgentFile], file_id: str) -> AgentFile:
    """The agent's file; a file of a folder not attached to the agent (or an unknown or
    another user's file) is a 404, so ids cannot be probed."""
    for f in files:
        if f.file_id == file_id:
            return f
    raise NotFound("file of a folder attached to this agent", file_id)


def _page(request: Request, files: list[AgentFile]) -> list[AgentFile]:
    """`after` (or the deprecated `cursor`) / `before`: a file id or a relationship id, in
    the sort order; an unknown cursor gives an empty page."""
    q = request.query_params
    after, before = q.get("after") or q.get("cursor"), q.get("before")
    ids = [(f.id, f.file_id) for f in files]

    def at(cursor: str) -> int | None:
        return next((i for i, pair in enumerate(ids) if cursor in pair), None)

    if after:
        i = at(after)
        files, ids = (files[i + 1 :], ids[i + 1 :]) if i is not None else ([], [])
    if before:
        i = at(before)
        files = files[:i] if i is not None else []
    return files


async def list_agent_files(request: Request) -> JSONResponse:
    """The files of the agent's folders with their open/closed state (`is_open`, `limit`
    (default 20), `after`, `before`, `order` (default desc), `order_by` created_at)."""
    _, _, files = await _agent_files(request)
    limit = query_int(request, "limit", 20)
    desc = query_choice(request, "order", ("asc", "desc"), "desc") == "desc"
    query_choice(request, "order_by", ("created_at",), "created_at")
    if "is_open" in request.query_params:
        wanted = query_bool(request, "is_open", False)
        files = [f for f in files if f.is_open == wanted]
    rest = _page(request, files[::-1] if desc else files)
    backwards = bool(request.query_params.get("before")) and not (
        request.query_params.get("after") or request.query_params.get("cursor")
    )
    page = rest[-limit:] if backwards else rest[:limit]
    more = len(rest) > limit
    return JSONResponse(
        {
            "files": [_json(f) for f in page],
            "next_cursor": (page[0] if backwards else page[-1]).id if page and more else None,
            "has_more": more,
        }
    )


async def open_agent_file(request: Request) -> JSONResponse:
    """Open a file (its first lines, as `open_files` without a range) → the names of the
    files closed to stay within `max_files_open`. A file still processing (or failed) has no
    text yet: 409."""
    gw = gateway_of(request)
    agent, store, files = await _agent_files(request)
    f = _one(files, request.path_params["file_id"])
    record = await gw.memory.files.get(f.file_id)
    if record.content is None:
        raise ApiError(
            409, f"file {f.file_id} has no text to open yet (processing_status {record.status})"
        )
    name = f"{f.folder_name}/{f.file_name}"
    _, _, closed = await store.open_window(
        agent.id, record, name, max_open(agent.metadata), chars=window_chars(agent.metadata)
    )
    gw.loop.prompts.forget(agent.id)
    return JSONResponse(closed)


async def close_agent_file(request: Request) -> JSONResponse:
    """Close one file of the agent (closed already: no change)."""
    gw = gateway_of(request)
    agent, store, files = await _agent_files(request)
    f = _one(files, request.path_params["file_id"])
    await store.close(agent.id, [f.file_id])
    gw.loop.prompts.forget(agent.id)
    return JSONResponse({"message": f"File id={f.file_id} successfully closed"})


async def close_all_agent_files(request: Request) -> JSONResponse:
    """Close every open file of the agent → the names of those closed."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    closed = await OpenFiles(gw.memory.db).close(agent.id)
    gw.loop.prompts.forget(agent.id)
    return JSONResponse(closed)


def routes() -> list[BaseRoute]:
    f = "/v1/agents/{agent_id}/files"
    return [
        Route(f, list_agent_files, methods=["GET"]),
        Route(f"{f}/close-all", close_all_agent_files, methods=["PATCH"]),
        Route(f"{f}/{{file_id}}/open", open_agent_file, methods=["PATCH"]),
        Route(f"{f}/{{file_id}}/close", close_agent_file, methods=["PATCH"]),
    ]
