"""LLM provider interface: streaming chat with tool calls, shared timeout/retry/error mapping."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger(__name__)


class LLMError(Exception):
    """The model endpoint failed (down, timeout, garbage). Maps to stop_reason llm_api_error."""

    def __init__(self, provider: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(f"{provider}: {message}")
        self.provider, self.message, self.retryable = provider, message, retryable


@dataclass(slots=True)
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass(slots=True)
class LLMChunk:
    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None


@dataclass(slots=True)
class LLMRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    purpose: Literal["chat", "summarize"] = "chat"
    temperature: float | None = None
    # a latency budget (voice): the wait for the first and each next chunk, instead of the
    # provider's own time-out; a request that runs out of it is not retried on the same
    # provider (a fallback provider, if any, is tried instead)
    timeout_s: float | None = None


class LLMProvider(ABC):
    """Base: time-out to first chunk and between chunks (the request's `timeout_s` or the
    provider's), one retry of a retryable failure before any output."""

    name = "llm"

    def __init__(self, *, timeout_s: float = 60.0, retries: int = 1) -> None:
        self.timeout_s = timeout_s
        self.retries = retries
        self.last_ttft_ms: float | None = None

    @abstractmethod
    def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        """Vendor call: yield chunks; raise anything on failure (mapped by the base)."""

    def map_error(self, exc: Exception) -> LLMError:
        return LLMError(self.name, f"{type(exc).__name__}: {exc}")

    async def stream(self, req: LLMRequest) -> AsyncGenerator[LLMChunk, None]:
        start = time.perf_counter()
        produced = False
        timeout_s = req.timeout_s or self.timeout_s
        for attempt in range(self.retries + 1):
            it = self._stream(req).__aiter__()
            try:
                while True:
                    try:
                        # not asyncio.wait_for: on 3.11 it drops a cancellation (barge-in) that
                        # arrives when the next chunk is already there
                        async with asyncio.timeout(timeout_s):
                            chunk = await it.__anext__()
                    except StopAsyncIteration:
                        return
                    if not produced:
                        produced = True
                        self.last_ttft_ms = (time.perf_counter() - start) * 1000
                    yield chunk
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except LLMError as exc:
                if produced or not exc.retryable or attempt == self.retries:
                    raise
                log.warning("retrying %s after %s", self.name, exc)
            except Exception as exc:
                err = exc if isinstance(exc, LLMError) else self.map_error(exc)
                timed_out = isinstance(exc, TimeoutError)
                if timed_out:
                    err = LLMError(self.name, f"no response within {timeout_s:g}s", retryable=True)
                last = attempt == self.retries or (timed_out and req.timeout_s is not None)
                if produced or not err.retryable or last:
                    raise err from exc
                log.warning("retrying %s after %s", self.name, err)
            finally:
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def models(self) -> list[str]:
        """The vendor's model names (its model list endpoint), for GET /v1/models/."""
        return []

    async def aclose(self) -> None:
        return None
