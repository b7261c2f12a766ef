"""Agent messages: send (JSON or SSE stream) and list with cursor pagination."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Literal, get_args

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from agents.approvals import Answer
from agents.approvals import waiting as waiting_in
from agents.events import (
    AgentEvent,
    ApprovalRequest,
    MessageSaved,
    ReasoningDelta,
    RunDone,
    TextDelta,
    ToolCallReady,
    ToolResult,
)
from agents.loop import TurnInput
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.protocol.letta import MessagesRequest, MessageType, iso
from voice_gateway.protocol.letta_messages import letta_messages, tool_return_json
from voice_gateway.routes.http import parse_body, query_bool, query_int

Events = Callable[[], AsyncGenerator[AgentEvent, None]]
Wants = Callable[[dict[str, Any]], bool]


def stop_json(done: RunDone) -> dict[str, Any]:
    return {"message_type": "stop_reason", "stop_reason": done.stop_reason}


def usage_json(done: RunDone) -> dict[str, Any]:
    u = done.usage
    return {
        "message_type": "usage_statistics",
        "completion_tokens": u.completion_tokens,
        "prompt_tokens": u.prompt_tokens,
        "total_tokens": u.total_tokens,
        "step_count": done.steps,
        "run_ids": [done.turn_id],
    }


async def _turn(request: Request) -> tuple[Any, str, TurnInput, MessagesRequest]:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, MessagesRequest)
    if body.conversation_id is not None:  # one of this agent's conversations, or 404
        await gw.memory.conversations.get(body.conversation_id, agent.id)
    inp = await turn_input(gw, agent, body, body.conversation_id)
    return gw, agent.id, inp, body


async def turn_input(
    gw: Gateway, agent: Any, body: MessagesRequest, conversation_id: str | None
) -> TurnInput:
    """The run's input: a user message, or the answers to the conversation's waiting calls
    (409 when it waits for none, or when a message comes while it waits)."""
    answers = body.answers()
    text = body.user_text()
    if text is None and answers is None:
        raise ApiError(422, "messages must include a user message with text content")
    clients = [c.spec() for c in body.client_tools or []]  # one named as the agent's wins
    waiting = await waiting_in(gw.memory, agent.id, conversation_id)
    if answers is not None:
        answers = match_answers(answers, waiting)
    elif waiting is not None:
        names = ", ".join(c.name for c in waiting[1])
        raise ApiError(
            409,
            "Cannot send a new message: the agent is waiting for approval on a tool call or "
            f"for a client tool result ({names}). Please approve or deny the pending request "
            "before continuing.",
        )
    return TurnInput(
        text=text or "",
        conversation_id=conversation_id,
        max_steps=body.max_steps,
        otid=body.otid(),
        answers=answers,
        client_tools=clients,
    )


def match_answers(answers: list[Answer], waiting: Any) -> list[Answer]:
    """Answers by the waiting calls' ids ("*" or the request's message id: every call), in
    Letta's words: answering when nothing waits, or naming a call that does not wait, is a
    400 (a waiting call left unanswered is refused by the loop)."""
    if waiting is None:
        raise ApiError(
            400,
            "Cannot process approval response: No tool call is currently awaiting approval. "
            "Please send a regular message to interact with the agent.",
        )
    request, calls = waiting
    ids = {c.id for c in calls}
    out: list[Answer] = []
    for a in answers:
        if a.call_id in ("*", request.id):
            out += [replace(a, call_id=c.id) for c in calls]
        elif a.call_id in ids:
            out.append(a)
        else:
            given = [x.call_id for x in answers]
            raise ApiError(400, f"Invalid tool call IDs: Expected {sorted(ids)}, got {given}")
    return out


async def send_message(request: Request) -> Response:
    """Send a message; the agent runs a turn. `streaming: true` returns SSE."""
    gw, agent_id, inp, body = await _turn(request)
    return await respond(gw, agent_id, inp, body)


async def respond(gw: Gateway, agent_id: str, inp: TurnInput, body: MessagesRequest) -> Response:
    """Run the turn and answer as Letta does: a LettaResponse, or SSE with `streaming`."""
    if body.streaming:
        return sse(gw, agent_id, inp, body)
    messages: list[dict[str, Any]] = []
    done: RunDone | None = None
    async with aclosing(gw.runs.run(gw.loop, agent_id, inp)) as events:
        async for ev in events:
            if isinstance(ev, MessageSaved) and ev.message.role != "user":
                shown = letta_messages(ev.message, body.use_assistant_message)
                messages += [m for m in shown if body.wants(m)]
            elif isinstance(ev, RunDone):
                done = ev
    assert done is not None
    gw.metrics.text_turn(done.stop_reason, done.model)
    out: dict[str, Any] = {
        "messages": messages,
        "stop_reason": stop_json(done),
        "usage": usage_json(done),
    }
    if done.error:
        out["error"] = done.error
    return JSONResponse(out)


async def stream_message(request: Request) -> Response:
    """Send a message and stream the agent's reply as SSE."""
    gw, agent_id, inp, body = await _turn(request)
    return sse(gw, agent_id, inp, body)


def _data(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def sse(gw: Gateway, agent_id: str, inp: TurnInput, req: MessagesRequest) -> StreamingResponse:
    """Run the turn (cancellable through its conversation) and stream it as SSE."""
    tokens = req.stream_tokens
    return sse_events(
        gw,
        lambda: gw.runs.run(gw.loop, agent_id, inp, tokens=tokens),
        tokens,
        wants=req.wants,
        assistant=req.use_assistant_message,
    )


def sse_events(
    gw: Gateway,
    events_of: Events,
    tokens: bool,
    count: bool = True,
    start: int = 0,
    wants: Wants | None = None,
    assistant: bool = True,
) -> StreamingResponse:
    """SSE of a run's events from event `start` on (`count`: a new turn for the metrics, not
    a resumed stream). Each chunk's `seq_id` is its event's number in the run: a client that
    lost the stream resumes with `starting_after` = the last seq_id it got."""
    return StreamingResponse(
        sse_frames(gw, events_of, tokens, count, start, wants, assistant),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def sse_frames(
    gw: Gateway,
    events_of: Events,
    tokens: bool,
    count: bool = True,
    start: int = 0,
    wants: Wants | None = None,
    assistant: bool = True,
) -> AsyncIterator[str]:
    """The SSE frames of `sse_events` (also mirrored to Redis: voice_gateway/run_mirror.py)."""
    seq = start
    async with aclosing(events_of()) as events:
        async for ev in events:
            seq += 1
            for chunk in _chunks(ev, tokens, assistant):
                if wants is None or wants(chunk):
                    yield _data({**chunk, "seq_id": seq})
            if isinstance(ev, RunDone):
                if count:
                    gw.metrics.text_turn(ev.stop_reason, ev.model)
                yield _data(stop_json(ev))
                yield _data(usage_json(ev))
                if ev.error:
                    err = {
                        "error": {"type": ev.stop_reason, "message": ev.error},
                        "detail": ev.error,
                    }
                    yield f"event: error\ndata: {json.dumps(err)}\n\n"
    yield "data: [DONE]\n\n"


def _chunks(ev: object, tokens: bool, assistant: bool = True) -> list[dict[str, Any]]:
    now = iso(None)
    if tokens:
        if isinstance(ev, TextDelta):
            return [
                {
                    "id": ev.message_id,
                    "date": now,
                    "message_type": "assistant_message",
                    "content": ev.text,
                }
            ]
        if isinstance(ev, ReasoningDelta):
            return [
                {
                    "id": ev.message_id,
                    "date": now,
                    "message_type": "reasoning_message",
                    "reasoning": ev.text,
                }
            ]
        if isinstance(ev, ToolCallReady):
            call = {"name": ev.name, "arguments": ev.arguments, "tool_call_id": ev.call_id}
            return [
                {
                    "id": ev.message_id,
                    "date": now,
                    "message_type": "tool_call_message",
                    "tool_call": call,
                    "tool_calls": [call],
                }
            ]
        if isinstance(ev, ApprovalRequest):
            calls = [
                {"name": c.name, "arguments": c.arguments, "tool_call_id": c.call_id}
                for c in ev.calls
            ]
            return [
                {
                    "id": ev.message_id,
                    "date": now,
                    "message_type": "approval_request_message",
                    "tool_call": calls[0],
                    "tool_calls": calls,
                }
            ]
        if isinstance(ev, ToolResult):
            return [
                {
                    "id": ev.message_id,
                    "date": now,
                    "message_type": "tool_return_message",
                    **tool_return_json(ev.result, ev.name),
                    "status": "success" if ev.ok else "error",
                    "tool_call_id": ev.call_id,
                    "name": ev.name,
                }
            ]
        return []
    if isinstance(ev, MessageSaved) and ev.message.role != "user":
        return letta_messages(ev.message, assistant)
    return []


MESSAGE_TYPES: frozenset[str] = frozenset(get_args(MessageType))


def query_message_types(request: Request) -> frozenset[str] | None:
    """`include_return_message_types` (repeated or comma-separated); an unknown type is a 422."""
    given = [
        t.strip()
        for v in request.query_params.getlist("include_return_message_types")
        for t in v.split(",")
        if t.strip()
    ]
    unknown = [t for t in given if t not in MESSAGE_TYPES]
    if unknown:
        raise ApiError(
            422,
            f"include_return_message_types: unknown message type {unknown[0]!r}; "
            f"known: {', '.join(sorted(MESSAGE_TYPES))}",
        )
    return frozenset(given) if given else None


def messages_json(
    rows: list[Any], kinds: frozenset[str] | None, use_assistant_message: bool = True
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in rows:
        shown = letta_messages(m, use_assistant_message)
        out += [x for x in shown if kinds is None or x["message_type"] in kinds]
    return out


async def list_messages(request: Request) -> JSONResponse:
    """List stored messages (limit, after, before, order asc|desc, conversation_id)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    conv_id = request.query_params.get("conversation_id")
    return await message_page(request, agent.id, conv_id, chronological=True)


async def message_page(
    request: Request, agent_id: str, conversation_id: str | None, chronological: bool = False
) -> JSONResponse:
    """A page of an agent's stored messages (of one conversation if given) in Letta's union,
    from the query's limit, after, before and order. `chronological`: Letta's agent history,
    where `after` is always newer and `before` older than its cursor, `order` picks the end a
    page is taken from (desc: the newest) and a page always reads oldest first."""
    q = request.query_params
    asked = q.get("order", "desc")
    if asked not in ("asc", "desc"):
        raise ApiError(422, "order must be 'asc' or 'desc'")
    order: Literal["asc", "desc"] = "asc" if asked == "asc" else "desc"
    kinds = query_message_types(request)
    after, before = q.get("after"), q.get("before")
    if chronological and order == "desc":  # the store's cursors follow its sort order
        after, before = before, after
    rows = await gateway_of(request).memory.messages.page(
        agent_id,
        limit=query_int(request, "limit", 100),
        after=after,
        before=before,
        order=order,
        conversation_id=conversation_id,
    )
    if chronological and order == "desc":
        rows = rows[::-1]
    assistant = query_bool(request, "use_assistant_message", True)
    return JSONResponse(messages_json(rows, kinds, assistant))


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/agents/{agent_id}/messages", send_message, methods=["POST"]),
        Route("/v1/agents/{agent_id}/messages/", send_message, methods=["POST"]),
        Route("/v1/agents/{agent_id}/messages/stream", stream_message, methods=["POST"]),
        Route("/v1/agents/{agent_id}/messages", list_messages, methods=["GET"]),
        Route("/v1/agents/{agent_id}/messages/", list_messages, methods=["GET"]),
    ]
