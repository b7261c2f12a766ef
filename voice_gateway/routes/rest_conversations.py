"""Conversations (Letta 1.x `client.conversations`): many concurrent dialogues on one agent,
each with its own context window, summary and turn lock; the agent's blocks are shared and a
caller's conversation also sees that caller's own blocks. `default` (with `agent_id`) is the
agent's default conversation, the one the agent routes talk to."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from memory.identities import BadCallerKey
from memory.ids import default_conversation_id
from voice_gateway.callers import open_conversation
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta_callers import (
    AgentNamed,
    ConversationCreate,
    ConversationMessages,
    ConversationUpdate,
    conversation_json,
)
from voice_gateway.routes import conversation_access as access
from voice_gateway.routes.http import parse_body, query_bool, query_int
from voice_gateway.routes.rest_messages import message_page, respond, sse_events, turn_input

_ARCHIVE = {"unarchived": False, "archived": True, "all": None}
# order_by: Letta's fields; last_message_at (what the list shows) sorts as last_run_completion
_BY_ACTIVITY = {"created_at": False, "last_run_completion": True, "last_message_at": True}


def _cid(request: Request) -> str:
    return str(request.path_params["conversation_id"])


async def _json(request: Request, conv: Any) -> dict[str, Any]:
    ids = await gateway_of(request).memory.conversations.in_context_ids(conv.id)
    return conversation_json(conv, ids)


async def create_conversation(request: Request) -> JSONResponse:
    """Create a conversation on an agent (`agent_id` query); `caller` names its caller."""
    gw = gateway_of(request)
    agent_id = request.query_params.get("agent_id")
    if not agent_id:
        raise ApiError(422, "query parameter 'agent_id' is required")
    agent = await gw.auth.agent(request, agent_id)
    body = await parse_body(request, ConversationCreate)
    try:
        opened = await open_conversation(gw.memory, agent, body.caller, source="text", new=True)
    except BadCallerKey as exc:
        raise ApiError(400, f"bad caller key: {exc}") from None
    conv = opened.conversation
    await access.system_message(gw, agent.id, conv.id, conv.identity_id)  # `new`: made now
    if body.summary is not None or body.model is not None:
        conv = await gw.memory.conversations.update(conv.id, summary=body.summary, model=body.model)
    return JSONResponse(await _json(request, conv))


async def list_conversations(request: Request) -> JSONResponse:
    """Conversations of an agent, or of all your agents (limit, after, order, order_by,
    archive_status, summary_search)."""
    gw = gateway_of(request)
    q = request.query_params
    status = q.get("archive_status", "unarchived")
    if status not in _ARCHIVE:
        raise ApiError(422, "archive_status must be 'unarchived', 'archived' or 'all'")
    order = q.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(422, "order must be 'asc' or 'desc'")
    order_by = q.get("order_by", "created_at")
    if order_by not in _BY_ACTIVITY:
        raise ApiError(422, f"order_by must be one of {', '.join(_BY_ACTIVITY)}")
    agent_id, agent_ids = q.get("agent_id"), None
    if agent_id:
        agent_id = (await gw.auth.agent(request, agent_id)).id
    else:
        agent_ids = await access.visible_agent_ids(request)
    convs = await gw.memory.conversations.page(
        agent_id=agent_id,
        agent_ids=agent_ids,
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        order=order,
        summary_search=q.get("summary_search"),
        archived=_ARCHIVE[status],
        by_activity=_BY_ACTIVITY[order_by],
    )
    return JSONResponse([conversation_json(c) for c in convs])


async def get_conversation(request: Request) -> JSONResponse:
    """Retrieve a conversation."""
    _, conv = await access.conversation(
        request, _cid(request), request.query_params.get("agent_id")
    )
    return JSONResponse(await _json(request, conv))


async def update_conversation(request: Request) -> JSONResponse:
    """Update a conversation's summary, model or archived flag."""
    gw = gateway_of(request)
    _, conv = await access.conversation(
        request, _cid(request), request.query_params.get("agent_id")
    )
    body = await parse_body(request, ConversationUpdate)
    fields = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    if "summary" in body.model_fields_set and body.summary is None:
        fields["summary"] = None
    conv = await gw.memory.conversations.update(conv.id, **fields)
    return JSONResponse(await _json(request, conv))


async def delete_conversation(request: Request) -> JSONResponse:
    """Delete a conversation and its messages (its running turns are cancelled first)."""
    gw = gateway_of(request)
    agent, conv = await access.conversation(
        request, _cid(request), request.query_params.get("agent_id")
    )
    if conv.id == default_conversation_id(agent.id):
        raise ApiError(400, "an agent's default conversation goes only with the agent")
    runs = gw.runs
    await runs.cancel(conv.id)
    async with gw.loop.locks.hold(conv.id):  # no turn of it half-written
        await gw.memory.conversations.delete(conv.id)
    runs.forget(conv.id)
    gw.memory.messages.cache.drop(conv.id)
    gw.loop.contexts.forget(conv.id)
    return JSONResponse({"detail": f"conversation {conv.id} deleted"})


async def cancel_conversation(request: Request) -> JSONResponse:
    """Cancel the conversation's running turns (each keeps what it had produced); nothing
    running is a 409, as in Letta."""
    gw = gateway_of(request)
    _, conv = await access.conversation(
        request, _cid(request), request.query_params.get("agent_id")
    )
    cancelled = await gw.runs.cancel(conv.id)
    if not cancelled:
        raise ApiError(409, f"No active runs to cancel for conversation {_cid(request)}")
    return JSONResponse({run_id: "cancelled" for run_id in cancelled})


async def send_conversation_message(request: Request) -> Response:
    """Send a message in a conversation: SSE by default, a LettaResponse with
    `streaming: false`."""
    gw = gateway_of(request)
    body = await parse_body(request, ConversationMessages)
    agent, conv = await access.conversation(request, _cid(request), body.agent_id)
    return await respond(gw, agent.id, await turn_input(gw, agent, body, conv.id), body)


async def list_conversation_messages(request: Request) -> JSONResponse:
    """Messages of a conversation (limit, after, before, order asc|desc)."""
    q = request.query_params
    agent, conv = await access.conversation(request, _cid(request), q.get("agent_id"))
    return await message_page(request, agent.id, conv.id)


async def resume_stream(request: Request) -> Response:
    """Stream the conversation's running turn (or its last one) again as SSE, from
    `starting_after` events on."""
    gw = gateway_of(request)
    body = await parse_body(request, AgentNamed)
    _, conv = await access.conversation(request, _cid(request), body.agent_id)
    run = gw.runs.latest(conv.id)
    if run is None or (body.run_id is not None and run.run_id != body.run_id):
        raise ApiError(400, f"No active runs found for conversation {conv.id}")
    if run.done and not run.background:  # Letta's: only a background run replays once ended
        raise ApiError(400, f"Run {run.run_id} has ended and was not created in background mode")
    start = body.starting_after or 0
    return sse_events(gw, lambda: run.follow(start), run.tokens, count=False, start=start)


async def compact_conversation(request: Request) -> JSONResponse:
    """Summarize the conversation's context window into one message."""
    gw = gateway_of(request)
    body = await parse_body(request, AgentNamed)
    agent, conv = await access.conversation(request, _cid(request), body.agent_id)
    return JSONResponse(await access.compact(gw, agent, conv))


async def fork_conversation(request: Request) -> JSONResponse:
    """A new conversation (same agent, same caller) with a copy of this one's context."""
    gw = gateway_of(request)
    q = request.query_params
    agent, conv = await access.conversation(request, _cid(request), q.get("agent_id"))
    new = await access.fork(gw, agent, conv, q.get("message_id"))
    return JSONResponse(await _json(request, new))


async def recompile_conversation(request: Request) -> JSONResponse:
    """The system prompt of the conversation's next turn, rebuilt from the current blocks."""
    gw = gateway_of(request)
    empty = not (await request.body()).strip()  # Letta's clients may send no body
    body = AgentNamed() if empty else await parse_body(request, AgentNamed)
    agent, conv = await access.conversation(request, _cid(request), body.agent_id)
    dry_run = query_bool(request, "dry_run", False)
    return JSONResponse(await access.recompile(gw, agent, conv, dry_run))


def routes() -> list[BaseRoute]:
    c = "/v1/conversations/{conversation_id}"
    table: list[BaseRoute] = []
    for path in ("/v1/conversations", "/v1/conversations/"):
        table += [
            Route(path, create_conversation, methods=["POST"]),
            Route(path, list_conversations, methods=["GET"]),
        ]
    return [
        *table,
        Route(c, get_conversation, methods=["GET"]),
        Route(c, update_conversation, methods=["PATCH"]),
        Route(c, delete_conversation, methods=["DELETE"]),
        Route(f"{c}/cancel", cancel_conversation, methods=["POST"]),
        Route(f"{c}/messages", send_conversation_message, methods=["POST"]),
        Route(f"{c}/messages", list_conversation_messages, methods=["GET"]),
        Route(f"{c}/stream", resume_stream, methods=["POST"]),
        Route(f"{c}/compact", compact_conversation, methods=["POST"]),
        Route(f"{c}/fork", fork_conversation, methods=["POST"]),
        Route(f"{c}/recompile", recompile_conversation, methods=["POST"]),
    ]
