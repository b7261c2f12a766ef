"""Text-to-speech interface: a time-out per audio chunk (VG_TTS_TIMEOUT_S), one retry of a fast
failure before any audio (not of a time-out), resampling to the caller's rate,
time-to-first-byte, and vendor errors mapped to TTSError."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator

from voice_gateway.audio import StreamingResampler, resample_whole

log = logging.getLogger(__name__)


class TTSError(Exception):
    def __init__(self, provider: str, message: str) -> None:
        super().__init__(f"{provider} TTS: {message}")
        self.provider, self.message = provider, message


class TTSProvider(ABC):
    name = "tts"
    native_rate = 16000
    streams_audio = False  # True: audio arrives in pieces (resample per piece, not per sentence)

    def __init__(self, *, timeout_s: float = 15.0, retries: int = 1) -> None:
        self.timeout_s = timeout_s
        self.retries = retries
        self.last_ttfb_ms: float | None = None

    @abstractmethod
    def _stream(self, text: str) -> AsyncIterator[bytes]:
        """PCM16 LE mono at `native_rate`; raise anything on failure."""

    async def synthesize(self, text: str, sample_rate: int) -> AsyncGenerator[bytes, None]:
        text = text.strip()
        if not text:
            return
        start = time.perf_counter()
        produced = False
        for attempt in range(self.retries + 1):
            it = self._stream(text).__aiter__()
            whole = b""
            resampler = (
                StreamingResampler(self.native_rate, sample_rate) if self.streams_audio else None
            )
            odd = b""  # a chunk may end mid-sample: carry the odd byte to the next one
            try:
                while True:
                    try:
                        async with asyncio.timeout(self.timeout_s):  # no task per chunk
                            chunk = await it.__anext__()
                    except StopAsyncIteration:
                        break
                    if not chunk:
                        continue
                    if resampler is None:
                        whole += chunk
                        continue
                    if odd or len(chunk) % 2:
                        chunk = odd + chunk
                        cut = len(chunk) // 2 * 2
                        chunk, odd = chunk[:cut], chunk[cut:]
                    out = resampler.process(chunk)
                    if out:
                        if not produced:
                            self.last_ttfb_ms = (time.perf_counter() - start) * 1000
                        produced = True
                        yield out
                if resampler is not None:
                    tail = resampler.flush()
                    if tail:
                        yield tail
                elif whole:
                    self.last_ttfb_ms = (time.perf_counter() - start) * 1000
                    produced = True
                    yield resample_whole(
                        whole[: len(whole) // 2 * 2], self.native_rate, sample_rate
                    )
                return
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:
                err = exc if isinstance(exc, TTSError) else TTSError(self.name, _describe(exc))
                # a hang is not retried: a second wait would double the caller's silence
                if produced or attempt == self.retries or isinstance(exc, TimeoutError):
                    raise err from exc
                log.warning("%s; retrying", err)
            finally:
                aclose = getattr(it, "aclose", None)
                if aclose is not None:
                    await aclose()

    async def synthesize_all(self, text: str, sample_rate: int) -> bytes:
        return b"".join([chunk async for chunk in self.synthesize(text, sample_rate)])

    async def warmup(self) -> None:
        await self.synthesize_all("Hello.", self.native_rate)

    async def aclose(self) -> None:
        return None


def _describe(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return "no audio in time"
    return f"{type(exc).__name__}: {exc}"
