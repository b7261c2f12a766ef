"""`POST /v1/chat/completions` with model = agent id: how LiveKit, Vapi and Pipecat use an
agent. Only the last user message is new input; the agent keeps the state."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from agents.context import TEXT
from agents.events import RunDone, TextDelta, ToolArgsDelta, ToolCallReady
from agents.locks import LockTimeout
from agents.loop import TurnInput
from agents.voice import DEFAULT_FILLER, VOICE, pre_exec_from_partial
from memory.ids import new_id
from memory.models import NotFound
from voice_gateway.callers import BadCallerKey, open_conversation
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.protocol.openai_chat import chat_request_problem
from voice_gateway.routes.http import load_json

log = logging.getLogger(__name__)


def oai_error(status: int, message: str, type_: str, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


def last_user_text(messages: Any) -> str | None:
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(
                    str(p.get("text", ""))
                    for p in content
                    if isinstance(p, dict) and p.get("type") == "text"
                )
            return str(content or "").strip() or None
    return None


async def chat_completions(request: Request) -> Response:
    gw = gateway_of(request)
    try:
        body = load_json(await request.body())
    except ApiError as exc:
        return oai_error(
            400, f"request body is not valid JSON ({exc.detail})", "invalid_request_error"
        )
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return oai_error(400, "'model' (an agent id) is required", "invalid_request_error")
    if (problem := chat_request_problem(body)) is not None:  # a field of the wrong type
        return oai_error(400, problem[1], "invalid_request_error")
    try:
        agent = await gw.auth.agent(request, body["model"])
    except NotFound:
        return oai_error(
            404,
            f"The model '{body['model']}' does not exist (model must be an agent id)",
            "invalid_request_error",
            "model_not_found",
        )
    except ApiError as exc:
        code = "invalid_api_key" if exc.status == 401 else None
        return oai_error(exc.status, exc.detail, "invalid_request_error", code)
    text = last_user_text(body.get("messages"))
    if text is None:
        return oai_error(
            400, "messages must contain a user message with text", "invalid_request_error"
        )
    voice = body["voice"] if isinstance(body.get("voice"), bool) else agent.voice_default
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        return oai_error(400, "'user' must be a string", "invalid_request_error")
    requested = conversation_of(body)
    try:
        if user is None and requested is None:  # no caller, no call: the default conversation
            conversation_id = None
        else:
            opened = await open_conversation(
                gw.memory,
                agent,
                user,
                requested=requested,
                source="voice" if voice else "text",
                adopt=True,
            )
            conversation_id = opened.conversation.id
    except BadCallerKey as exc:
        return oai_error(400, f"user: {exc}", "invalid_request_error")
    except NotFound:
        return oai_error(
            404, f"conversation not found: {requested}", "invalid_request_error", "not_found"
        )
    inp = TurnInput(
        text=text,
        mode=VOICE if voice else TEXT,
        source="voice" if voice else "text",
        conversation_id=conversation_id,
    )
    run = _Run(gw, agent.id, inp, voice)
    if body.get("stream") is True:
        options = body.get("stream_options")
        usage_chunk = isinstance(options, dict) and options.get("include_usage") is True
        return StreamingResponse(
            run.sse(body["model"], usage_chunk), media_type="text/event-stream"
        )
    return await run.complete(body["model"])


def conversation_of(body: dict[str, Any]) -> str | None:
    """Group a platform's turns: `conversation_id` or Vapi's `call.id` (OpenAI's `user` names
    the caller: their conversation is found from it)."""
    call = body.get("call")
    for value in (
        body.get("conversation_id"),
        call.get("id") if isinstance(call, dict) else None,
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()[:64]
    return None


class _Run:
    def __init__(self, gw: Gateway, agent_id: str, inp: TurnInput, voice: bool) -> None:
        self.gw, self.agent_id, self.inp, self.voice = gw, agent_id, inp, voice
        self.id = f"chatcmpl-{new_id('x')[2:26]}"
        self.created = int(time.time())
        self.done: RunDone | None = None

    async def pieces(self) -> AsyncIterator[str]:
        """Content pieces: model text, and in voice mode each tool call's pre_exec_msg as
        soon as it has streamed in (the platform speaks it while the tool runs; a
        search_memory call without one gets the standard phrase)."""
        said: set[str] = set()
        last = ""
        async with aclosing(self.gw.loop.run(self.agent_id, self.inp)) as events:
            async for ev in events:
                piece: str | None = None
                if isinstance(ev, TextDelta):
                    piece = ev.text
                elif isinstance(ev, ToolArgsDelta | ToolCallReady) and self.voice:
                    piece = self._filler(ev, said)
                    if piece and last and not last[-1].isspace():
                        piece = " " + piece
                elif isinstance(ev, RunDone):
                    self.done = ev
                    self.gw.metrics.text_turn(ev.stop_reason, ev.model, self.inp.source)
                if piece:
                    last = piece
                    yield piece

    @staticmethod
    def _filler(ev: ToolArgsDelta | ToolCallReady, said: set[str]) -> str | None:
        if ev.call_id in said:
            return None
        if isinstance(ev, ToolArgsDelta):
            text = pre_exec_from_partial(ev.arguments)
        else:  # the call is complete: its pre_exec_msg, or the phrase for a memory search
            text = ev.pre_exec_msg or (DEFAULT_FILLER if ev.name == "search_memory" else None)
        if not text:
            return None
        said.add(ev.call_id)
        return text + " "

    def usage(self) -> dict[str, int]:
        u = self.done.usage if self.done else None
        p, c = (u.prompt_tokens, u.completion_tokens) if u else (0, 0)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _chunk(self, model: str, delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(chunk)}\n\n"

    async def sse(self, model: str, usage_chunk: bool) -> AsyncIterator[str]:
        yield self._chunk(model, {"role": "assistant", "content": ""})
        try:
            async for piece in self.pieces():
                yield self._chunk(model, {"content": piece})
        except LockTimeout as exc:
            yield _sse_error(f"the agent is busy with another turn: {exc}", "agent_busy")
            return
        if self.done is not None and self.done.stop_reason in ("llm_api_error", "error"):
            yield _sse_error(self.done.error or "the agent's model failed", self.done.stop_reason)
            return
        finish = "length" if self.done and self.done.stop_reason == "max_steps" else "stop"
        yield self._chunk(model, {}, finish)
        if usage_chunk:
            tail = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": model,
                "choices": [],
                "usage": self.usage(),
            }
            yield f"data: {json.dumps(tail)}\n\n"
        yield "data: [DONE]\n\n"

    async def complete(self, model: str) -> Response:
        try:
            content = "".join([p async for p in self.pieces()])
        except LockTimeout as exc:
            msg = f"the agent is busy with another turn: {exc}"
            return oai_error(409, msg, "invalid_request_error", "agent_busy")
        if self.done is not None and self.done.stop_reason in ("llm_api_error", "error"):
            return oai_error(
                502,
                self.done.error or "the agent's model failed",
                "server_error",
                self.done.stop_reason,
            )
        finish = "length" if self.done and self.done.stop_reason == "max_steps" else "stop"
        return JSONResponse(
            {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": self.usage(),
            }
        )


def _sse_error(message: str, code: str) -> str:
    err = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return f"data: {json.dumps(err)}\n\n"


def routes() -> list[BaseRoute]:
    return [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
