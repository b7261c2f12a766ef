"""Messages across agents (`client.messages`: list, retrieve, search), an agent's context
window (`reset-messages`, `summarize`, `recompile`) and tags. What one may see is what one's
agents stored; another user's message is a 404 like an unknown one."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.models import NotFound
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import _Body, iso
from voice_gateway.protocol.letta_messages import letta_messages
from voice_gateway.routes import conversation_access as access
from voice_gateway.routes.agent_state import agent_out
from voice_gateway.routes.http import parse_body, query_bool, query_choice, query_int
from voice_gateway.routes.rest_messages import messages_json, query_message_types


class SearchRequest(_Body):
    query: str = Field(min_length=1, max_length=2000)
    agent_id: str | None = Field(None, max_length=64)
    conversation_id: str | None = Field(None, max_length=64)
    start_date: datetime | None = Field(None, strict=False)
    end_date: datetime | None = Field(None, strict=False)
    limit: int = Field(50, ge=1, le=1000)
    search_mode: Literal["vector", "fts", "hybrid"] = "fts"


class ResetRequest(_Body):
    add_default_initial_messages: bool = False


async def list_all_messages(request: Request) -> JSONResponse:
    """Messages of all your agents, newest first (conversation_id, limit, after, before,
    order, include_return_message_types)."""
    gw = gateway_of(request)
    q = request.query_params
    kinds = query_message_types(request)
    agent_ids = await access.visible_agent_ids(request)
    conv_id = q.get("conversation_id")
    if conv_id:
        agent, conv = await access.conversation(request, conv_id, q.get("agent_id"))
        conv_id, agent_ids = conv.id, [agent.id]
    rows = await gw.memory.messages.page(
        None,
        agent_ids=agent_ids,
        conversation_id=conv_id,
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order="asc" if query_choice(request, "order", ("asc", "desc"), "desc") == "asc" else "desc",
    )
    return JSONResponse(messages_json(rows, kinds))


async def get_message(request: Request) -> JSONResponse:
    """Retrieve a message (as the Letta messages it reads as)."""
    gw = gateway_of(request)
    message_id = str(request.path_params["message_id"])
    message = await gw.memory.messages.get(message_id)
    try:
        await gw.auth.agent(request, message.agent_id)
    except NotFound:
        raise NotFound("message", message_id) from None
    return JSONResponse(letta_messages(message))


def _hit(m: Any) -> list[dict[str, Any]]:
    base = {
        "message_id": m.id,
        "agent_id": m.agent_id,
        "conversation_id": m.conversation_id,
        "created_at": iso(m.created_at),
    }
    out: list[dict[str, Any]] = []
    for x in letta_messages(m):
        kind = x["message_type"]
        if kind in ("user_message", "system_message", "assistant_message"):
            out.append({**base, "message_type": kind, "content": x["content"]})
        elif kind == "reasoning_message":
            out.append({**base, "message_type": kind, "reasoning": x["reasoning"]})
    return out


async def search_messages(request: Request) -> JSONResponse:
    """Full-text search over your agents' messages (agent_id, conversation_id, dates)."""
    gw = gateway_of(request)
    body = await parse_body(request, SearchRequest)
    agent_ids = await access.visible_agent_ids(request)
    agent_id = None
    if body.agent_id:
        agent_id = (await gw.auth.agent(request, body.agent_id)).id
    if body.conversation_id:
        agent, conv = await access.conversation(request, body.conversation_id, body.agent_id)
        agent_id, body.conversation_id = agent.id, conv.id
    rows = await gw.memory.messages.search_all(
        agent_ids,
        body.query,
        agent_id=agent_id,
        conversation_id=body.conversation_id,
        start=body.start_date,
        end=body.end_date,
        limit=body.limit,
    )
    out: list[dict[str, Any]] = []
    for m in rows:
        out += _hit(m)
    return JSONResponse(out[: body.limit])


async def reset_messages(request: Request) -> JSONResponse:
    """Empty the agent's (default conversation's) context window; the messages stay in
    recall. (`add_default_initial_messages`: this server's agents start with none.)"""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    await parse_body(request, ResetRequest)
    conv_id = await gw.memory.conversations.ensure_default(agent.id, agent.user_id)
    async with gw.loop.locks.hold(conv_id):  # no turn of it half-written
        await gw.memory.messages.reset(conv_id)
    gw.loop.contexts.forget(conv_id)
    return JSONResponse(await agent_out(request, agent))


async def summarize(request: Request) -> JSONResponse:
    """Fold the agent's (default conversation's) context window into a summary."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    _, conv = await access.conversation(request, "default", agent.id)
    return JSONResponse(await access.compact(gw, agent, conv))


async def recompile(request: Request) -> JSONResponse:
    """The agent's system prompt rebuilt from its blocks as they are now (`dry_run`)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    _, conv = await access.conversation(request, "default", agent.id)
    text = await access.recompile(gw, agent, conv, query_bool(request, "dry_run", False))
    return JSONResponse(text)


async def list_tags(request: Request) -> JSONResponse:
    """Tags of your agents (name or query_text filter, after, before, limit, order)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    tags = await gw.memory.agents.tags(user_id=p.user_id, scoped=p.scoped)
    if text := (q.get("name") or q.get("query_text") or "").lower():
        tags = [t for t in tags if text in t.lower()]
    if query_choice(request, "order", ("asc", "desc"), "asc") == "desc":
        tags.reverse()
    desc = q.get("order") == "desc"
    if after := q.get("after"):
        tags = [t for t in tags if (t < after if desc else t > after)]
    if before := q.get("before"):
        tags = [t for t in tags if (t > before if desc else t < before)]
    return JSONResponse(tags[: query_int(request, "limit", 50)])


def routes() -> list[BaseRoute]:
    a = "/v1/agents/{agent_id}"
    return [
        Route("/v1/messages", list_all_messages, methods=["GET"]),
        Route("/v1/messages/", list_all_messages, methods=["GET"]),
        Route("/v1/messages/search", search_messages, methods=["POST"]),
        Route("/v1/messages/{message_id}", get_message, methods=["GET"]),
        Route(f"{a}/reset-messages", reset_messages, methods=["PATCH"]),
        Route(f"{a}/summarize", summarize, methods=["POST"]),
        Route(f"{a}/recompile", recompile, methods=["POST"]),
        Route("/v1/tags", list_tags, methods=["GET"]),
        Route("/v1/tags/", list_tags, methods=["GET"]),
    ]
