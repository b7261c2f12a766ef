"""Core memory blocks (with history) and archival memory (tools: rest_tools.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import (
    BlockUpdate,
    PassageIn,
    block_json,
    iso,
    passage_json,
    search_result_json,
)
from voice_gateway.routes.http import (
    paginate,
    parse_body,
    query_bool,
    query_choice,
    query_int,
)


async def list_blocks(request: Request) -> JSONResponse:
    """The agent's core memory blocks."""
    agent = await gateway_of(request).auth.agent(request, request.path_params["agent_id"])
    blocks = [block_json(b) for b in agent.blocks if b.scope != "file"]  # open files apart
    return JSONResponse(paginate(request, blocks))


async def get_block(request: Request) -> JSONResponse:
    """One core memory block by label."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    return JSONResponse(
        block_json(await gw.memory.blocks.get(agent.id, request.path_params["label"]))
    )


async def update_block(request: Request) -> JSONResponse:
    """Edit a block (value, limit, description, read_only; `label` renames it). Send
    `If-Match: <version>` (or a `version` field) to fail with 409 instead of overwriting a
    newer version."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, BlockUpdate)
    expected = body.version
    if_match = request.headers.get("if-match", "").strip('" ')
    if if_match:
        if not if_match.isdigit():
            raise ApiError(422, "If-Match must be a block version number")
        expected = int(if_match)
    fields = {  # null clears the description; a null limit or read_only means "unchanged"
        k: v
        for k, v in body.model_dump(exclude_unset=True).items()
        if k in ("limit", "description", "read_only") and (v is not None or k == "description")
    }
    value = body.value
    label = request.path_params["label"]
    block = await gw.memory.blocks.get(agent.id, label)
    if value is not None or fields or expected is not None or not body.label:
        block = await gw.memory.blocks.modify(
            agent.id,
            label,
            (lambda _old: value) if value is not None else None,
            actor="user",
            expected_version=expected,
            fields=fields,
        )
    if body.label and body.label != label:  # Letta's rename (`label` in the body)
        block = await gw.memory.blocks.rename(agent.id, label, body.label)
        for seen_by in {agent.id, *await gw.memory.blocks.agents_of(block)}:
            gw.loop.prompts.forget(seen_by)  # a new label, the same version
    return JSONResponse(block_json(block))


async def block_history(request: Request) -> JSONResponse:
    """Who changed a block, when, and from what to what (newest first)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    changes = await gw.memory.blocks.history(
        agent.id, request.path_params["label"], query_int(request, "limit", 100)
    )
    return JSONResponse([{**c.model_dump(), "created_at": iso(c.created_at)} for c in changes])


async def list_passages(request: Request) -> JSONResponse:
    """Archival passages (limit, after, ascending, search)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    rows = await gw.memory.archival.page(
        agent.id,
        limit=query_int(request, "limit", 100),
        after=request.query_params.get("after"),
        ascending=query_bool(request, "ascending", True),
        search=request.query_params.get("search"),
    )
    return JSONResponse([passage_json(p) for p in rows])


async def create_passage(request: Request) -> JSONResponse:
    """Insert a passage into archival memory (embedded for semantic search)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, PassageIn)
    rows = await gw.memory.archival.insert(
        agent.id, [body.text], body.tags, created_at=body.created_at
    )
    return JSONResponse([passage_json(p) for p in rows])


_DATE_TIME = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)?", re.A)


def _when(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:  # a date-time (RFC 3339; the offset may be left out): not a bare date, not empty
        if not _DATE_TIME.fullmatch(raw):
            raise ValueError(raw)
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise ApiError(422, f"query parameter '{name}' must be an ISO 8601 date-time") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


async def search_passages(request: Request) -> JSONResponse:
    """Semantic search: query, top_k, tags, tag_match_mode, start_datetime, end_datetime."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    query = request.query_params.get("query", "").strip()
    if not query:
        raise ApiError(422, "query is required")
    hits = await gw.memory.archival.search(
        agent.id,
        query,
        query_int(request, "top_k", 10, hi=100),
        tags=request.query_params.getlist("tags") or None,
        match_all_tags=query_choice(request, "tag_match_mode", ("any", "all"), "any") == "all",
        start=_when(request, "start_datetime"),
        end=_when(request, "end_datetime"),
    )
    return JSONResponse({"count": len(hits), "results": [search_result_json(h) for h in hits]})


async def delete_passage(request: Request) -> JSONResponse:
    """Delete one archival passage."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    await gw.memory.archival.delete(agent.id, request.path_params["passage_id"])
    return JSONResponse({"detail": "deleted"})


def routes() -> list[BaseRoute]:
    a = "/v1/agents/{agent_id}"
    return [
        Route(f"{a}/core-memory/blocks", list_blocks, methods=["GET"]),
        Route(f"{a}/core-memory/blocks/", list_blocks, methods=["GET"]),
        Route(f"{a}/core-memory/blocks/{{label}}", get_block, methods=["GET"]),
        Route(f"{a}/core-memory/blocks/{{label}}", update_block, methods=["PATCH"]),
        Route(f"{a}/core-memory/blocks/{{label}}/history", block_history, methods=["GET"]),
        Route(f"{a}/archival-memory", list_passages, methods=["GET"]),
        Route(f"{a}/archival-memory/", list_passages, methods=["GET"]),
        Route(f"{a}/archival-memory", create_passage, methods=["POST"]),
        Route(f"{a}/archival-memory/", create_passage, methods=["POST"]),
        Route(f"{a}/archival-memory/search", search_passages, methods=["GET"]),
        Route(f"{a}/archival-memory/{{passage_id}}", delete_passage, methods=["DELETE"]),
    ]
