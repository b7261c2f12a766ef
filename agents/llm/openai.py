"""Any OpenAI-compatible chat endpoint: OpenAI, Google AI, Groq, Together, Mistral, Azure,
Ollama, vLLM, LM Studio, llama.cpp server, SGLang (agents/llm/providers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
from openai import AsyncOpenAI

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest, ToolCallDelta, Usage


class OpenAIProvider(LLMProvider):
    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        timeout_s: float = 60.0,
        name: str = "openai",
    ) -> None:
        super().__init__(timeout_s=timeout_s)
        self.name = name  # the provider of the handle (groq, ollama, ...): in errors and metrics
        self.client = AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=0, timeout=timeout_s
        )

    def map_error(self, exc: Exception) -> LLMError:
        if isinstance(exc, openai.APIStatusError):
            retry = exc.status_code in (429, 500, 502, 503, 504)
            return LLMError(self.name, f"HTTP {exc.status_code}: {exc.message}", retryable=retry)
        if isinstance(exc, openai.APIConnectionError | openai.APITimeoutError):
            return LLMError(self.name, f"cannot reach the endpoint: {exc}", retryable=True)
        return LLMError(self.name, f"bad response from the endpoint: {type(exc).__name__}: {exc}")

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        kwargs: dict[str, Any] = {
            "model": req.model,
            "messages": req.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if req.tools:
            kwargs["tools"] = req.tools
        if req.temperature is not None:
            kwargs["temperature"] = req.temperature
        stream = await self.client.chat.completions.create(**kwargs)
        async with stream:
            async for chunk in stream:
                out = LLMChunk()
                if chunk.usage is not None:
                    out.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                for choice in chunk.choices or []:
                    delta = choice.delta
                    if delta is None:
                        continue
                    out.text += delta.content or ""
                    out.reasoning += getattr(delta, "reasoning_content", None) or ""
                    for tc in delta.tool_calls or []:
                        fn = tc.function
                        out.tool_calls.append(
                            ToolCallDelta(
                                index=tc.index,
                                id=tc.id,
                                name=fn.name if fn else None,
                                arguments=(fn.arguments or "") if fn else "",
                            )
                        )
                    out.finish_reason = choice.finish_reason or out.finish_reason
                yield out

    async def models(self) -> list[str]:
        return [m.id async for m in self.client.models.list()]

    async def aclose(self) -> None:
        await self.client.close()
