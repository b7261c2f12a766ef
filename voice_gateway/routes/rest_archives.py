"""Archives (shared archival memory), their passages, attaching them to agents, and
`POST /v1/passages/search` (docs/rest_api.md, "Archives")."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from memory.archival import SearchFilter
from memory.archives import ArchiveData
from memory.embeddings import validate_handle
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import passage_json
from voice_gateway.protocol.letta_sources import (
    ArchiveIn,
    ArchivePassageIn,
    ArchivePassagesIn,
    ArchiveUpdate,
    PassageSearchIn,
    archive_json,
    search_item_json,
)
from voice_gateway.routes.http import parse_body, query_choice, query_int


def embedding_handle(request: Request, handle: str | None, config: dict[str, Any] | None) -> str:
    """An embedding handle from `embedding` or `embedding_config.handle` (else the default)."""
    chosen = (
        handle or (config or {}).get("handle") or gateway_of(request).settings.default_embedding
    )
    try:
        validate_handle(str(chosen))
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc
    return str(chosen)


async def _archive(request: Request) -> ArchiveData:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    archive_id = request.path_params["archive_id"]
    archive: ArchiveData = await gw.memory.archives.get(archive_id, p.user_id, scoped=p.scoped)
    return archive


async def create_archive(request: Request) -> JSONResponse:
    """Create a shared archive."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, ArchiveIn)
    handle = embedding_handle(request, body.embedding, body.embedding_config)
    archive = await gw.memory.archives.create(
        p.user_id, body.name, handle, body.description, body.metadata
    )
    return JSONResponse(archive_json(archive))


async def list_archives(request: Request) -> JSONResponse:
    """Your archives (after, before, limit, name, agent_id, order)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    agent_id = q.get("agent_id")
    if agent_id:
        await gw.auth.agent(request, agent_id)
    rows = await gw.memory.archives.page(
        p.user_id,
        scoped=p.scoped,
        agent_id=agent_id,
        name=q.get("name"),
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        before=q.get("before"),
        desc=query_choice(request, "order", ("asc", "desc"), "desc") == "desc",
    )
    return JSONResponse([archive_json(a) for a in rows])


async def get_archive(request: Request) -> JSONResponse:
    return JSONResponse(archive_json(await _archive(request)))


async def update_archive(request: Request) -> JSONResponse:
    """Rename an archive or change its description."""
    archive = await _archive(request)
    body = await parse_body(request, ArchiveUpdate)
    fields = {
        k: v
        for k, v in body.model_dump(exclude_unset=True).items()
        if v is not None or k == "description"
    }
    updated = await gateway_of(request).memory.archives.update(archive.id, **fields)
    return JSONResponse(archive_json(updated))


async def delete_archive(request: Request) -> Response:
    """Delete a shared archive with its passages (an agent's own archive: 409)."""
    archive = await _archive(request)
    await gateway_of(request).memory.archives.delete(archive.id)
    return Response(status_code=204)


async def add_archive_passage(request: Request) -> JSONResponse:
    """Add a passage (embedded with the archive's embedding model)."""
    archive = await _archive(request)
    body = await parse_body(request, ArchivePassageIn)
    rows = await gateway_of(request).memory.archives.add_passages(
        archive, [(body.text, body.tags or [], body.created_at)]
    )
    return JSONResponse(passage_json(rows[0]))


async def add_archive_passages(request: Request) -> JSONResponse:
    """Add passages in one transaction: all of them or none."""
    archive = await _archive(request)
    body = await parse_body(request, ArchivePassagesIn)
    rows = await gateway_of(request).memory.archives.add_passages(
        archive, [(p.text, p.tags or [], p.created_at) for p in body.passages]
    )
    return JSONResponse([passage_json(r) for r in rows])


async def delete_archive_passage(request: Request) -> Response:
    archive = await _archive(request)
    await gateway_of(request).memory.archives.delete_passage(
        archive.id, request.path_params["passage_id"]
    )
    return Response(status_code=204)


async def attach_archive(request: Request) -> JSONResponse:
    """Attach an archive to an agent: the agent's searches cover it."""
    return await _set_attached(request, True)


async def detach_archive(request: Request) -> JSONResponse:
    return await _set_attached(request, False)


async def _set_attached(request: Request, attached: bool) -> JSONResponse:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    archive = await _archive(request)
    await gw.memory.archives.set_attached(agent.id, archive.id, attached)
    return JSONResponse(None)


async def search_all_passages(request: Request) -> JSONResponse:
    """Semantic search over an agent's archives, one archive, or all of yours. Passages a
    caller's own conversations stored are not found here (no caller asks)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, PassageSearchIn)
    query = (body.query or "").strip()
    if not query:
        raise ApiError(422, "query is required")
    if body.agent_id:
        await gw.auth.agent(request, body.agent_id)
    flt = SearchFilter(
        body.tags or None, body.tag_match_mode == "all", body.start_date, body.end_date
    )
    hits = await gw.memory.archives.search(
        query,
        body.limit,
        flt,
        user_id=p.user_id,
        scoped=p.scoped,
        agent_id=body.agent_id,
        archive_id=body.archive_id,
    )
    return JSONResponse([search_item_json(h) for h in hits])


def routes() -> list[BaseRoute]:
    a = "/v1/archives/{archive_id}"
    return [
        Route("/v1/archives", create_archive, methods=["POST"]),
        Route("/v1/archives/", create_archive, methods=["POST"]),
        Route("/v1/archives", list_archives, methods=["GET"]),
        Route("/v1/archives/", list_archives, methods=["GET"]),
        Route(a, get_archive, methods=["GET"]),
        Route(a, update_archive, methods=["PATCH"]),
        Route(a, delete_archive, methods=["DELETE"]),
        Route(f"{a}/passages", add_archive_passage, methods=["POST"]),
        Route(f"{a}/passages/batch", add_archive_passages, methods=["POST"]),
        Route(f"{a}/passages/{{passage_id}}", delete_archive_passage, methods=["DELETE"]),
        Route(
            "/v1/agents/{agent_id}/archives/attach/{archive_id}", attach_archive, methods=["PATCH"]
        ),
        Route(
            "/v1/agents/{agent_id}/archives/detach/{archive_id}", detach_archive, methods=["PATCH"]
        ),
        Route("/v1/passages/search", search_all_passages, methods=["POST"]),
    ]
