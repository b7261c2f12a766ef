"""Blocks by id (Letta 1.x): shared blocks that sit on several agents, attach and detach, and
reading or correcting any block you may see (a caller's own blocks: `identity_id` filter).
An edit reaches every agent that sees the block on its next turn (live calls get
`memory.updated`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.models import BlockData
from memory.shared_blocks import SharedBlocks
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta_callers import BlockCreate, SharedBlockUpdate, shared_block_json
from voice_gateway.routes import rest_groups
from voice_gateway.routes.agent_state import agent_out
from voice_gateway.routes.http import parse_body, query_choice, query_int


def _store(request: Request) -> SharedBlocks:
    memory = gateway_of(request).memory
    return SharedBlocks(memory.db, memory.blocks)


async def _block(request: Request, block_id: str) -> BlockData:
    p = await gateway_of(request).auth.principal(request)
    return await _store(request).get(block_id, p.user_id, scoped=p.scoped)


async def _notify(request: Request, block: BlockData, agent_ids: list[str]) -> None:
    gw = gateway_of(request)
    hook = gw.memory.blocks.on_change
    for agent_id in agent_ids:
        gw.loop.prompts.forget(agent_id)
        if hook is not None:
            await hook(agent_id, block.label, block.version, block.scope, block.identity_id)


async def create_shared_block(request: Request) -> JSONResponse:
    """Create a standalone block, to attach to agents."""
    p = await gateway_of(request).auth.principal(request)
    body = await parse_body(request, BlockCreate)
    spec = body.spec()
    if len(spec.value) > spec.limit:
        raise ApiError(422, f"value is {len(spec.value)} characters, limit {spec.limit}")
    block = await _store(request).create(p.user_id, spec)
    return JSONResponse(shared_block_json(block))


async def list_shared_blocks(request: Request) -> JSONResponse:
    """Blocks you may see (label, identity_id, limit, after, order)."""
    p = await gateway_of(request).auth.principal(request)
    q = request.query_params
    order = q.get("order", "asc")
    if order not in ("asc", "desc"):
        raise ApiError(422, "order must be 'asc' or 'desc'")
    blocks = await _store(request).page(
        p.user_id,
        scoped=p.scoped,
        label=q.get("label"),
        identity_id=q.get("identity_id"),
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        order=order,
    )
    return JSONResponse([shared_block_json(b) for b in blocks])


async def get_shared_block(request: Request) -> JSONResponse:
    """Retrieve a block by id."""
    return JSONResponse(shared_block_json(await _block(request, request.path_params["block_id"])))


async def update_shared_block(request: Request) -> JSONResponse:
    """Edit a block by id (value, limit, description, read_only; `version` or `If-Match` to
    fail with 409 instead of overwriting a newer version)."""
    gw = gateway_of(request)
    block = await _block(request, request.path_params["block_id"])
    body = await parse_body(request, SharedBlockUpdate)
    expected = body.version
    if_match = request.headers.get("if-match", "").strip('" ')
    if if_match:
        if not if_match.isdigit():
            raise ApiError(422, "If-Match must be a block version number")
        expected = int(if_match)
    fields = {
        k: v
        for k, v in body.model_dump(exclude_unset=True).items()
        if k in ("limit", "description", "read_only") and (v is not None or k == "description")
    }
    value = body.value
    updated = await gw.memory.blocks.modify_id(
        block.id,
        (lambda _old: value) if value is not None else None,
        actor="user",
        expected_version=expected,
        fields=fields,
        label=block.label,
    )
    for agent_id in await gw.memory.blocks.agents_of(updated):
        gw.loop.prompts.forget(agent_id)
    return JSONResponse(shared_block_json(updated))


async def delete_shared_block(request: Request) -> JSONResponse:
    """Delete a block (detached from every agent)."""
    block = await _block(request, request.path_params["block_id"])
    agents = await _store(request).delete(block)
    await _notify(request, block, agents)
    return JSONResponse({"detail": f"block {block.id} deleted"})


async def attach_block(request: Request) -> JSONResponse:
    """Attach a block to an agent (again: no change; a label it has already: 409)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    block = await _block(request, request.path_params["block_id"])
    if await _store(request).attach(block, agent.id):
        await _notify(request, block, [agent.id])
    await rest_groups.follow_attach(gw, agent.id, block.id, attached=True)
    return JSONResponse(await agent_out(request, await gw.memory.agents.get(agent.id)))


async def detach_block(request: Request) -> JSONResponse:
    """Detach a shared block from an agent (not attached: 404)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    block = await _block(request, request.path_params["block_id"])
    await _store(request).detach(block.id, agent.id)
    await _notify(request, block, [agent.id])
    await rest_groups.follow_attach(gw, agent.id, block.id, attached=False)
    return JSONResponse(await agent_out(request, await gw.memory.agents.get(agent.id)))


async def block_agents(request: Request) -> JSONResponse:
    """The agents a block is on (the agent that owns it, those it is attached to): only your
    agents (limit, after, before, order, as the agent list)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    block = await _block(request, request.path_params["block_id"])
    q = request.query_params
    query_choice(request, "order_by", ("created_at",), "created_at")
    agents = await gw.memory.agents.page(
        user_id=p.user_id,
        scoped=p.scoped,
        ids=await gw.memory.blocks.agents_of(block),
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        before=q.get("before"),
        order=query_choice(request, "order", ("asc", "desc"), "asc"),
    )
    return JSONResponse([await agent_out(request, a) for a in agents])


def routes() -> list[BaseRoute]:
    b = "/v1/blocks/{block_id}"
    a = "/v1/agents/{agent_id}/core-memory/blocks"
    return [
        Route("/v1/blocks", create_shared_block, methods=["POST"]),
        Route("/v1/blocks/", create_shared_block, methods=["POST"]),
        Route("/v1/blocks", list_shared_blocks, methods=["GET"]),
        Route("/v1/blocks/", list_shared_blocks, methods=["GET"]),
        Route(b, get_shared_block, methods=["GET"]),
        Route(b, update_shared_block, methods=["PATCH"]),
        Route(b, delete_shared_block, methods=["DELETE"]),
        Route(f"{b}/agents", block_agents, methods=["GET"]),
        Route(f"{a}/attach/{{block_id}}", attach_block, methods=["PATCH"]),
        Route(f"{a}/detach/{{block_id}}", detach_block, methods=["PATCH"]),
    ]
