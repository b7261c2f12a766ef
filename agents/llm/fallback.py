"""A model with a fallback model (VG_LLM_FALLBACK): one provider to the agent loop.

When the primary fails with a retryable LLMError (down, 5xx, rate-limited, timed out) before
it produced any output, the same request goes to the fallback model. A failure after output
is raised as it is (the loop stops the turn with llm_api_error): the caller has already seen
part of the primary's answer. LLMRegistry wraps every handle but the fallback's own."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace

from agents.llm.base import LLMChunk, LLMError, LLMProvider, LLMRequest

log = logging.getLogger(__name__)


class FallbackLLM(LLMProvider):
    def __init__(
        self, primary: LLMProvider, fallback: LLMProvider, fallback_model: str, handle: str
    ) -> None:
        super().__init__(timeout_s=primary.timeout_s, retries=0)
        self.primary, self.fallback = primary, fallback
        self.fallback_model, self.fallback_handle = fallback_model, handle
        self.name = f"{primary.name}>{handle}"
        self.served: Counter[str] = Counter()  # model calls answered, by provider

    def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        return self.stream(req)

    async def stream(self, req: LLMRequest) -> AsyncGenerator[LLMChunk, None]:
        start = time.perf_counter()
        produced = False
        try:
            async with aclosing(self.primary.stream(req)) as chunks:
                async for chunk in chunks:
                    if not produced:
                        produced = True
                        self.last_ttft_ms = (time.perf_counter() - start) * 1000
                    yield chunk
            self.served[self.primary.name] += 1
            return
        except LLMError as exc:
            if produced or not exc.retryable:
                raise
            log.warning(
                "LLM %s/%s failed before any output (%s); answering with %s",
                self.primary.name,
                req.model,
                exc.message,
                self.fallback_handle,
            )
        async with aclosing(self.fallback.stream(replace(req, model=self.fallback_model))) as fb:
            async for chunk in fb:
                if not produced:  # the time to first token includes the primary's failure
                    produced = True
                    self.last_ttft_ms = (time.perf_counter() - start) * 1000
                yield chunk
        self.served[self.fallback_handle] += 1

    async def aclose(self) -> None:
        return None  # the registry closes the providers it wraps
