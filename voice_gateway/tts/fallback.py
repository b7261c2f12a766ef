"""A primary TTS voice with a fallback (VG_TTS_FALLBACK), e.g. deepgram then espeak.

A sentence the primary fails before its first audio (error or time-out, after the base's own
retry) is spoken by the fallback instead; a failure after audio went out is raised (the
caller already heard part of it: the reply's apology covers it). After a failure the primary
is skipped for `cooldown_s`."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from voice_gateway.tts.base import TTSError, TTSProvider

log = logging.getLogger(__name__)


class FallbackTTS(TTSProvider):
    def __init__(self, primary: TTSProvider, fallback: TTSProvider, cooldown_s: float = 30.0):
        super().__init__(timeout_s=primary.timeout_s, retries=0)
        self.primary, self.fallback, self.cooldown_s = primary, fallback, cooldown_s
        self.name = f"{primary.name}>{fallback.name}"
        self.native_rate = primary.native_rate
        self.streams_audio = primary.streams_audio
        self.served: Counter[str] = Counter()  # sentences spoken, by provider
        self._skip_until = 0.0

    def _stream(self, text: str) -> AsyncIterator[bytes]:
        return self.synthesize(text, self.native_rate)

    async def synthesize(self, text: str, sample_rate: int) -> AsyncGenerator[bytes, None]:
        if time.monotonic() >= self._skip_until:
            produced = False
            try:
                async with aclosing(self.primary.synthesize(text, sample_rate)) as audio:
                    async for chunk in audio:
                        produced = True
                        self.last_ttfb_ms = self.primary.last_ttfb_ms
                        yield chunk
                self.served[self.primary.name] += 1
                return
            except TTSError as exc:
                if produced:
                    raise
                self._skip_until = time.monotonic() + self.cooldown_s
                log.warning(
                    "TTS %s failed (%s); %s speaks for the next %gs",
                    self.primary.name,
                    exc,
                    self.fallback.name,
                    self.cooldown_s,
                )
        async with aclosing(self.fallback.synthesize(text, sample_rate)) as audio:
            async for chunk in audio:
                self.last_ttfb_ms = self.fallback.last_ttfb_ms
                yield chunk
        self.served[self.fallback.name] += 1

    async def warmup(self) -> None:
        await self.fallback.warmup()  # must work: it is what keeps calls going
        try:
            await self.primary.warmup()
        except Exception as exc:
            self._skip_until = time.monotonic() + self.cooldown_s
            log.warning("TTS %s failed its warm-up (%s)", self.primary.name, exc)

    async def aclose(self) -> None:
        await self.primary.aclose()
        await self.fallback.aclose()
