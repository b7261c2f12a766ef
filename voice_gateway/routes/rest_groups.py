"""Letta's sleeptime groups: `enable_sleeptime` gives an agent a sleeptime agent that shares
its blocks (Letta's `multi_agent_group`), and `/v1/groups/{id}` reads, tunes and removes it.

The sleeptime agent is an agent row the API shows (its tools, its tool rules, the primary's
blocks attached to it), so a Letta client finds it where Letta puts it. Its work is done by
the gateway's one sleeptime worker (agents/sleeptime.py), which rewrites the primary's shared
blocks per caller; no second agent loop runs for it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.tools import SLEEPTIME_TOOLS
from memory.models import AgentData, NotFound
from memory.shared_blocks import SharedBlocks
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.protocol.letta import _Body
from voice_gateway.protocol.letta_groups import (
    DEFAULT_FREQUENCY,
    FREQUENCY,
    SLEEPTIME_OF,
    group_json,
    primary_of_group,
    sleeptime_agent_id,
)
from voice_gateway.routes.http import parse_body

# what a sleeptime agent takes off its primary (Letta's): the primary no longer edits memory
MEMORY_EDIT_TOOLS = {"core_memory_append", "core_memory_replace", "archival_memory_insert"}


class ManagerConfigIn(_Body):
    manager_type: Literal["sleeptime"]
    sleeptime_agent_frequency: int | None = Field(None, ge=1, le=10_000)


class GroupUpdate(_Body):
    description: str | None = Field(None, max_length=2000)
    manager_config: ManagerConfigIn | None = None


async def sleeptime_of(gw: Gateway, primary_id: str) -> AgentData | None:
    """The agent's sleeptime agent, None without one."""
    try:
        agent = await gw.memory.agents.get(sleeptime_agent_id(primary_id))
    except NotFound:
        return None
    return agent if agent.metadata.get(SLEEPTIME_OF) == primary_id else None


async def enable(gw: Gateway, primary: AgentData) -> AgentData:
    """Give `primary` its sleeptime agent (it has one: that one), its blocks attached."""
    existing = await sleeptime_of(gw, primary.id)
    if existing is not None:
        return existing
    agent = await gw.memory.agents.create(
        user_id=primary.user_id,
        blocks=[],
        agent_id=sleeptime_agent_id(primary.id),
        name=f"{primary.name}-sleeptime",
        system="",
        description=f"sleeptime agent of {primary.id}",
        model=primary.model,
        embedding=primary.embedding,
        tool_names=list(SLEEPTIME_TOOLS),
        tool_rules=[{"type": "exit_loop", "tool_name": "memory_finish_edits"}],
        tags=[],
        metadata={SLEEPTIME_OF: primary.id, FREQUENCY: DEFAULT_FREQUENCY},
    )
    shared = SharedBlocks(gw.memory.db, gw.memory.blocks)
    for block in primary.blocks:
        if block.scope != "file" and block.identity_id is None:
            await shared.attach(block, agent.id)
    return await gw.memory.agents.get(agent.id)


async def disable(gw: Gateway, primary_id: str) -> None:
    """Remove the agent's sleeptime agent, if it has one."""
    if await sleeptime_of(gw, primary_id) is not None:
        await gw.memory.agents.delete(sleeptime_agent_id(primary_id))
        gw.loop.prompts.forget(sleeptime_agent_id(primary_id))


async def follow_attach(gw: Gateway, agent_id: str, block_id: str, attached: bool) -> None:
    """A block attached to (detached from) an agent with a sleeptime agent is attached to
    (detached from) that one too, as Letta keeps the group's blocks shared."""
    helper = await sleeptime_of(gw, agent_id)
    if helper is None:
        return
    shared = SharedBlocks(gw.memory.db, gw.memory.blocks)
    if attached:
        block = next(
            (b for b in (await gw.memory.agents.get(agent_id)).blocks if b.id == block_id), None
        )
        if block is not None:
            await shared.attach(block, helper.id)
    elif any(b.id == block_id for b in helper.blocks):
        await shared.detach(block_id, helper.id)


async def _group(request: Request) -> tuple[AgentData, AgentData]:
    gw = gateway_of(request)
    gid = request.path_params["group_id"]
    primary_id = primary_of_group(gid)
    if primary_id is None:
        raise ApiError(404, f"group not found: {gid}")
    try:
        primary = await gw.auth.agent(request, primary_id)
    except NotFound:
        raise ApiError(404, f"group not found: {gid}") from None
    helper = await sleeptime_of(gw, primary.id)
    if helper is None:
        raise ApiError(404, f"group not found: {gid}")
    return primary, helper


async def list_groups(request: Request) -> JSONResponse:
    """Your agents' sleeptime groups (`manager_type` sleeptime or none: all of them)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    kind = request.query_params.get("manager_type")
    out: list[dict[str, Any]] = []
    if kind not in (None, "sleeptime"):
        return JSONResponse(out)
    for agent in await gw.memory.agents.page(user_id=p.user_id, scoped=p.scoped, limit=1000):
        primary_id = agent.metadata.get(SLEEPTIME_OF)
        if isinstance(primary_id, str) and agent.id == sleeptime_agent_id(primary_id):
            try:
                primary = await gw.memory.agents.get(primary_id)
            except NotFound:
                continue
            out.append(group_json(primary, agent))
    return JSONResponse(out)


async def get_group(request: Request) -> JSONResponse:
    """A sleeptime group (unknown or another user's: 404)."""
    primary, helper = await _group(request)
    return JSONResponse(group_json(primary, helper))


async def update_group(request: Request) -> JSONResponse:
    """Set the sleeptime agent's frequency (`manager_config.sleeptime_agent_frequency`)."""
    gw = gateway_of(request)
    primary, helper = await _group(request)
    body = await parse_body(request, GroupUpdate)
    meta = dict(helper.metadata)
    if body.manager_config and body.manager_config.sleeptime_agent_frequency is not None:
        meta[FREQUENCY] = body.manager_config.sleeptime_agent_frequency
    fields: dict[str, Any] = {"metadata": meta}
    if body.description is not None:
        fields["description"] = body.description
    helper = await gw.memory.agents.update(helper.id, **fields)
    return JSONResponse(group_json(primary, helper))


async def delete_group(request: Request) -> JSONResponse:
    """Remove the sleeptime agent (the primary keeps its blocks)."""
    primary, _ = await _group(request)
    await disable(gateway_of(request), primary.id)
    return JSONResponse({"detail": f"group {request.path_params['group_id']} deleted"})


def routes() -> list[BaseRoute]:
    g = "/v1/groups/{group_id}"
    return [
        Route("/v1/groups", list_groups, methods=["GET"]),
        Route("/v1/groups/", list_groups, methods=["GET"]),
        Route(g, get_group, methods=["GET"]),
        Route(g, update_group, methods=["PATCH"]),
        Route(g, delete_group, methods=["DELETE"]),
    ]
