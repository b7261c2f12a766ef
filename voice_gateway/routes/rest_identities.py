"""Callers as Letta identities: list an agent's callers, read their own blocks (`block_ids`,
then `/v1/blocks/{id}`), attach or detach them, and erase a caller (`DELETE`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.identities import BadCallerKey, check_caller_key
from memory.models import IdentityData
from voice_gateway.erasure import erase_caller
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta_callers import IdentityCreate, IdentityUpdate, identity_json
from voice_gateway.routes.http import parse_body, query_int


async def _identity(request: Request, identity_id: str) -> IdentityData:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    found: IdentityData = await gw.memory.identities.get(identity_id, p.user_id, scoped=p.scoped)
    return found


async def _out(request: Request, identity: IdentityData) -> dict[str, Any]:
    store = gateway_of(request).memory.identities
    return identity_json(
        identity, await store.agent_ids(identity.id), await store.block_ids(identity.id)
    )


async def _attach_all(request: Request, identity: IdentityData, agent_ids: list[str]) -> None:
    gw = gateway_of(request)
    for agent_id in agent_ids:
        agent = await gw.auth.agent(request, agent_id)
        await gw.memory.identities.attach(identity.id, agent.id)
        await gw.memory.blocks.ensure_caller_copies(agent.id, identity.id)


def _key(raw: str) -> str:
    try:
        return check_caller_key(raw)
    except BadCallerKey as exc:
        raise ApiError(400, f"bad identifier_key: {exc}") from None


async def list_identities(request: Request) -> JSONResponse:
    """Callers (agent_id, identifier_key, name, limit, after)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    agent_id = q.get("agent_id")
    if agent_id:
        agent_id = (await gw.auth.agent(request, agent_id)).id
    rows = await gw.memory.identities.page(
        p.user_id,
        scoped=p.scoped,
        agent_id=agent_id,
        identifier_key=q.get("identifier_key"),
        name=q.get("name"),
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
    )
    return JSONResponse([await _out(request, i) for i in rows])


async def _create(request: Request, upsert: bool) -> JSONResponse:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, IdentityCreate)
    key = _key(body.identifier_key)
    existing = await gw.memory.identities.by_key(p.user_id, key)
    if existing is not None and not upsert:
        raise ApiError(409, "an identity with this identifier_key exists")
    for agent_id in body.agent_ids:  # every agent must be yours before anything is written
        await gw.auth.agent(request, agent_id)
    identity = existing or await gw.memory.identities.resolve(p.user_id, key)
    identity = await gw.memory.identities.update(
        identity.id,
        name=body.name or key,
        identity_type=body.identity_type,
        properties=body.properties,
    )
    await _attach_all(request, identity, body.agent_ids)
    return JSONResponse(await _out(request, identity), status_code=200 if upsert else 201)


async def create_identity(request: Request) -> JSONResponse:
    """Create a caller identity (`identifier_key` = the caller key)."""
    return await _create(request, upsert=False)


async def upsert_identity(request: Request) -> JSONResponse:
    """Create or update the identity of an `identifier_key`."""
    return await _create(request, upsert=True)


async def get_identity(request: Request) -> JSONResponse:
    """Retrieve a caller identity with its agents and own blocks."""
    return JSONResponse(
        await _out(request, await _identity(request, request.path_params["identity_id"]))
    )


async def update_identity(request: Request) -> JSONResponse:
    """Update a caller's name, key, type, properties or agents."""
    gw = gateway_of(request)
    identity = await _identity(request, request.path_params["identity_id"])
    body = await parse_body(request, IdentityUpdate)
    fields = body.model_dump(exclude_unset=True, exclude={"agent_ids"})
    if body.identifier_key is not None:
        fields["identifier_key"] = _key(body.identifier_key)
        other = await gw.memory.identities.by_key(identity.user_id, fields["identifier_key"])
        if other is not None and other.id != identity.id:
            raise ApiError(409, "an identity with this identifier_key exists")
    identity = await gw.memory.identities.update(identity.id, **fields)
    if body.agent_ids is not None:
        await _attach_all(request, identity, body.agent_ids)
    return JSONResponse(await _out(request, identity))


async def delete_identity(request: Request) -> JSONResponse:
    """Erase a caller: conversations, messages, own blocks, passages, queued turns."""
    identity = await _identity(request, request.path_params["identity_id"])
    erased = await erase_caller(gateway_of(request), identity.id)
    return JSONResponse({"detail": f"identity {identity.id} erased", "erased": erased})


async def attach_identity(request: Request) -> JSONResponse:
    """Record a caller on an agent (their own blocks are made from its templates)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    identity = await _identity(request, request.path_params["identity_id"])
    await _attach_all(request, identity, [agent.id])
    return JSONResponse(await _out(request, identity))


async def detach_identity(request: Request) -> JSONResponse:
    """Remove a caller from an agent's callers (their memory stays until erased)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    identity = await _identity(request, request.path_params["identity_id"])
    if not await gw.memory.identities.detach(identity.id, agent.id):
        raise ApiError(404, f"identity {identity.id} is not attached to agent {agent.id}")
    return JSONResponse(await _out(request, identity))


def routes() -> list[BaseRoute]:
    i = "/v1/identities/{identity_id}"
    a = "/v1/agents/{agent_id}/identities"
    table: list[BaseRoute] = []
    for path in ("/v1/identities", "/v1/identities/"):
        table += [
            Route(path, list_identities, methods=["GET"]),
            Route(path, create_identity, methods=["POST"]),
            Route(path, upsert_identity, methods=["PUT"]),
        ]
    return [
        *table,
        Route(i, get_identity, methods=["GET"]),
        Route(i, update_identity, methods=["PATCH"]),
        Route(i, delete_identity, methods=["DELETE"]),
        Route(f"{a}/attach/{{identity_id}}", attach_identity, methods=["PATCH"]),
        Route(f"{a}/detach/{{identity_id}}", detach_identity, methods=["PATCH"]),
    ]
