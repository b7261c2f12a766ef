"""Anthropic's Messages API through the `anthropic` SDK: our OpenAI-shaped request (system,
user, assistant with tool_calls, tool results) becomes Messages (a `system` string, tool_use
and tool_result blocks), and the SSE stream (text, thinking and input_json deltas of content
blocks) becomes LLMChunks, each tool_use block one streamed tool call."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
from anthropic import AsyncAnthropic

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest, ToolCallDelta, Usage

MAX_TOKENS = 4096
STOP_REASONS = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def _arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except ValueError:
        return {"raw": raw}
    return args if isinstance(args, dict) else {"value": args}


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Messages alternate user/assistant: a turn of the same role is merged into the last."""
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def to_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, Anthropic messages) of OpenAI-style chat messages."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role, text = m["role"], m.get("content") or ""
        if role == "system":
            system.append(str(text))
        elif role == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": text}
            _append(out, "user", [block])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for tc in m.get("tool_calls") or []:
                fn = tc["function"]
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tc["id"],
                        "name": fn["name"],
                        "input": _arguments(fn.get("arguments", "")),
                    }
                )
            if blocks:
                _append(out, "assistant", blocks)
        elif text:
            _append(out, "user", [{"type": "text", "text": str(text)}])
    if not out or out[0]["role"] != "user":  # the API wants a user turn first
        out.insert(0, {"role": "user", "content": [{"type": "text", "text": "(start)"}]})
    return "\n\n".join(system), out


def to_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description") or "",
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in tools
    ]


class AnthropicProvider(LLMProvider):
    name = "anthropic"

    def __init__(self, *, api_key: str | None, base_url: str | None, timeout_s: float = 60.0):
        super().__init__(timeout_s=timeout_s)
        self.client = AsyncAnthropic(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=0, timeout=timeout_s
        )

    def map_error(self, exc: Exception) -> LLMError:
        if isinstance(exc, anthropic.APIStatusError):
            retry = exc.status_code in (429, 500, 502, 503, 504, 529)
            return LLMError(self.name, f"HTTP {exc.status_code}: {exc.message}", retryable=retry)
        if isinstance(exc, anthropic.APIConnectionError):
            return LLMError(self.name, f"cannot reach the endpoint: {exc}", retryable=True)
        return LLMError(self.name, f"bad response from the endpoint: {type(exc).__name__}: {exc}")

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        system, messages = to_messages(req.messages)
        kwargs: dict[str, Any] = {
            "model": req.model,
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "stream": True,
        }
        if system:
            kwargs["system"] = system
        if req.tools:
            kwargs["tools"] = to_tools(req.tools)
        if req.temperature is not None:
            kwargs["temperature"] = req.temperature
        stream = await self.client.messages.create(**kwargs)
        calls: dict[int, int] = {}  # content block index -> our tool call index
        prompt_tokens = 0
        async with stream:
            async for event in stream:
                out = LLMChunk()
                if event.type == "message_start":
                    prompt_tokens = event.message.usage.input_tokens or 0
                elif event.type == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        calls[event.index] = len(calls)
                        out.tool_calls.append(
                            ToolCallDelta(index=calls[event.index], id=block.id, name=block.name)
                        )
                    elif block.type == "text" and block.text:
                        out.text = block.text
                elif event.type == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        out.text = delta.text
                    elif delta.type == "thinking_delta":
                        out.reasoning = delta.thinking
                    elif delta.type == "input_json_delta" and event.index in calls:
                        out.tool_calls.append(
                            ToolCallDelta(index=calls[event.index], arguments=delta.partial_json)
                        )
                elif event.type == "message_delta":
                    reason = event.delta.stop_reason
                    out.finish_reason = STOP_REASONS.get(reason or "", reason)
                    usage = event.usage
                    prompt = usage.input_tokens if usage.input_tokens is not None else None
                    out.usage = Usage(prompt or prompt_tokens, usage.output_tokens)
                else:
                    continue
                yield out

    async def models(self) -> list[str]:
        return [m.id async for m in self.client.models.list()]

    async def aclose(self) -> None:
        await self.client.close()
