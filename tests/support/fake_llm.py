"""A loopback OpenAI-compatible chat-completions server that the real `openai` SDK talks to.

Scripted replies (text pieces, streamed tool calls with argument fragments), configurable time
to first token and per-chunk delay, and failure modes (HTTP error, garbage mid-stream, drop).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class ToolCallSpec:
    name: str
    arguments: dict[str, Any] | str
    fragments: int = 3  # the arguments JSON is streamed in this many pieces


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    ttft_s: float = 0.0
    chunk_delay_s: float = 0.0
    fail_status: int | None = None  # answer with this HTTP status instead
    garbage_after: int | None = None  # send invalid JSON after this many chunks
    drop_after: int | None = None  # close the connection after this many chunks
    words_per_chunk: int = 1


Responder = Callable[[dict[str, Any]], Reply]
Hook = Callable[[dict[str, Any]], Awaitable[None]]


def default_responder(body: dict[str, Any]) -> Reply:
    last = next((m for m in reversed(body["messages"]) if m["role"] in ("user", "tool")), None)
    content = str(last.get("content") if last else "")
    if last and last["role"] == "tool":
        return Reply(text=f"The tool said: {content[:200]}")
    return Reply(text=f"You said: {content}. That is all I know.")


class FakeLLM:
    """Queue replies with `push`; otherwise `responder` decides. Records every request.
    `before` (optional) is awaited on the server's loop after a request is recorded and
    before it is answered: a test can hold one request until another one has arrived."""

    def __init__(self, responder: Responder = default_responder) -> None:
        self.responder = responder
        self.queue: list[Reply] = []
        self.requests: list[dict[str, Any]] = []
        self.first_chunk_at: list[float] = []
        self.cancelled = 0
        self.before: Hook | None = None
        self.models = ["fake"]  # GET /v1/models
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.handle, methods=["POST"]),
                Route("/v1/models", self.list_models, methods=["GET"]),
            ]
        )

    async def list_models(self, request: Request) -> Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    def push(self, *replies: Reply) -> None:
        self.queue.extend(replies)

    async def wait_request(
        self, match: Callable[[dict[str, Any]], bool], timeout: float
    ) -> dict[str, Any] | None:
        """On the server's loop (from a `before` hook): the first recorded request that
        `match`es, waiting up to `timeout` seconds for one to arrive; None if none came."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((r for r in list(self.requests) if match(r)), None)
            if found is not None or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.02)

    async def handle(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if self.before is not None:
            await self.before(body)
        reply = self.queue.pop(0) if self.queue else self.responder(body)
        if reply.fail_status:
            await asyncio.sleep(reply.ttft_s)
            return JSONResponse(
                {"error": {"message": "scripted failure", "type": "server_error", "code": None}},
                status_code=reply.fail_status,
            )
        if not body.get("stream"):
            return JSONResponse(self._completion(body, reply))
        return StreamingResponse(self._sse(body, reply), media_type="text/event-stream")

    def _chunks(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        words = reply.text.split(" ") if reply.text else []
        n = max(1, reply.words_per_chunk)
        pieces = [
            " ".join(words[i : i + n]) + (" " if i + n < len(words) else "")
            for i in range(0, len(words), n)
        ]
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": p} for p in pieces]
        for index, tc in enumerate(reply.tool_calls):
            raw = tc.arguments if isinstance(tc.arguments, str) else json.dumps(tc.arguments)
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": f"call_{index}_{int(time.time() * 1000)}",
                            "type": "function",
                            "function": {"name": tc.name, "arguments": ""},
                        }
                    ]
                }
            )
            step = max(1, -(-len(raw) // max(1, tc.fragments)))
            for i in range(0, len(raw), step):
                deltas.append(
                    {"tool_calls": [{"index": index, "function": {"arguments": raw[i : i + step]}}]}
                )
        finish = "tool_calls" if reply.tool_calls else "stop"
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
        }
        out = [
            {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        prompt = sum(len(str(m.get("content") or "")) for m in body["messages"]) // 4
        out.append(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": len(words) + 1,
                    "total_tokens": prompt + len(words) + 1,
                },
            }
        )
        return out

    async def _sse(self, body: dict[str, Any], reply: Reply) -> AsyncIterator[bytes]:
        try:
            await asyncio.sleep(reply.ttft_s)
            for i, chunk in enumerate(self._chunks(body, reply)):
                if reply.garbage_after is not None and i == reply.garbage_after:
                    yield b"data: {this is not json\n\n"
                    return
                if reply.drop_after is not None and i == reply.drop_after:
                    raise ConnectionResetError("scripted drop")
                if i == 0:
                    self.first_chunk_at.append(time.monotonic())
                elif reply.chunk_delay_s:
                    await asyncio.sleep(reply.chunk_delay_s)
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    def _completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": tc.name,
                        "arguments": tc.arguments
                        if isinstance(tc.arguments, str)
                        else json.dumps(tc.arguments),
                    },
                }
                for i, tc in enumerate(reply.tool_calls)
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
