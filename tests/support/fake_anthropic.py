"""A loopback server speaking Anthropic's Messages API, which the real `anthropic` SDK talks to.

`POST /v1/messages` with `stream: true` answers Anthropic's SSE events (message_start,
content_block_start/delta/stop with text_delta and input_json_delta, message_delta with the
stop reason and usage, message_stop); without it, one Message. Requests are checked as the
vendor checks them (the API key, max_tokens, a first user turn, alternating roles, every
tool_result answering a tool_use of the turn before, a string system prompt): a violation is
a 400 with Anthropic's error body, so a wrong conversion fails the test. `GET /v1/models`
lists `models`. Replies are scripted with tests.support.fake_llm's Reply / ToolCallSpec."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.fake_llm import Reply

API_KEY = "sk-ant-test"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for b in content:
        if b.get("type") == "text":
            parts.append(b["text"])
        elif b.get("type") == "tool_result":
            inner = b.get("content")
            parts.append(inner if isinstance(inner, str) else _text_of(inner or []))
    return "".join(parts)


def default_responder(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    blocks = last["content"] if isinstance(last["content"], list) else []
    if any(b.get("type") == "tool_result" for b in blocks):
        return Reply(text=f"The tool said: {_text_of(blocks)[:200]}")
    return Reply(text=f"You said: {_text_of(last['content'])}. That is all I know.")


def problem(body: dict[str, Any]) -> str | None:
    """What Anthropic would refuse in this request, or None."""
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    if "system" in body and not isinstance(body["system"], str | list):
        return "system: Input should be a valid string"
    msgs = body.get("messages") or []
    if not msgs or msgs[0]["role"] != "user":
        return "messages: the first message must use the user role"
    uses: set[str] = set()
    for i, m in enumerate(msgs):
        if i and m["role"] == msgs[i - 1]["role"]:
            return f"messages.{i}: roles must alternate between user and assistant"
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "user":
            for b in blocks:
                if b.get("type") == "tool_result" and b.get("tool_use_id") not in uses:
                    return f"messages.{i}: tool_result without a tool_use in the previous turn"
        uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
    return None


class FakeAnthropic:
    def __init__(self, models: tuple[str, ...] = ("claude-sonnet-4-6", "claude-haiku-4-5")):
        self.models = list(models)
        self.responder = default_responder
        self.queue: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/models", self.list_models, methods=["GET"]),
            ]
        )

    def push(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    @staticmethod
    def _authorized(request: Request) -> bool:
        """The key as x-api-key (SDK 0.x/1.x) or a bearer token (SDK 2.x), and a version."""
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        key = request.headers.get("x-api-key") or bearer
        return key == API_KEY and "anthropic-version" in request.headers

    @staticmethod
    def _error(status: int, kind: str, message: str) -> JSONResponse:
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return JSONResponse(body, status_code=status)

    async def list_models(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "authentication_error", "invalid x-api-key")
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2025-09-29T00:00:00Z"}
            for m in self.models
        ]
        return JSONResponse({"data": data, "has_more": False, "first_id": None, "last_id": None})

    async def messages(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "authentication_error", "invalid x-api-key")
        body = await request.json()
        self.requests.append(body)
        wrong = problem(body)
        if wrong:
            return self._error(400, "invalid_request_error", wrong)
        reply = self.queue.pop(0) if self.queue else self.responder(body)
        if reply.fail_status:
            return self._error(reply.fail_status, "overloaded_error", "scripted failure")
        if not body.get("stream"):
            return JSONResponse(self._message(body, reply))
        return StreamingResponse(self._sse(body, reply), media_type="text/event-stream")

    def _blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
        for i, tc in enumerate(reply.tool_calls):
            args = tc.arguments if isinstance(tc.arguments, dict) else json.loads(tc.arguments)
            blocks.append(
                {"type": "tool_use", "id": f"toolu_{i:02d}", "name": tc.name, "input": args}
            )
        return blocks

    def _message(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": self._blocks(reply),
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": len(reply.text.split()) + 1},
        }

    def _events(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        start = self._message(body, reply)
        stop = start["stop_reason"]
        prompt = len(json.dumps(body["messages"])) // 4
        start.update(
            content=[], stop_reason=None, usage={"input_tokens": prompt, "output_tokens": 1}
        )
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": start},
            {"type": "ping"},
        ]
        for index, block in enumerate(self._blocks(reply)):
            if block["type"] == "text":
                events.append({"type": "content_block_start", "index": index,
                               "content_block": {"type": "text", "text": ""}})  # fmt: skip
                words = block["text"].split(" ")
                for i, w in enumerate(words):
                    piece = w + (" " if i < len(words) - 1 else "")
                    events.append({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "text_delta", "text": piece}})  # fmt: skip
            else:
                events.append({"type": "content_block_start", "index": index,
                               "content_block": {**block, "input": {}}})  # fmt: skip
                raw = json.dumps(block["input"])
                spec = reply.tool_calls[index - (1 if reply.text else 0)]
                step = max(1, -(-len(raw) // max(1, spec.fragments)))
                for i in range(0, len(raw), step):
                    events.append({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "input_json_delta",
                                             "partial_json": raw[i : i + step]}})  # fmt: skip
            events.append({"type": "content_block_stop", "index": index})
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": stop, "stop_sequence": None},
                       "usage": {"output_tokens": len(reply.text.split()) + 1}})  # fmt: skip
        events.append({"type": "message_stop"})
        return events

    async def _sse(self, body: dict[str, Any], reply: Reply) -> AsyncIterator[bytes]:
        await asyncio.sleep(reply.ttft_s)
        for i, event in enumerate(self._events(body, reply)):
            if i and reply.chunk_delay_s:
                await asyncio.sleep(reply.chunk_delay_s)
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
