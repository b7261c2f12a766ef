"""Speech-to-text interface. The gateway's VAD decides where an utterance ends; a stream
gets the utterance's audio (`push`) and returns its text (`finish`)."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

PartialCallback = Callable[[str], Awaitable[None]]


class STTError(Exception):
    def __init__(self, provider: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(f"{provider} STT: {message}")
        self.provider, self.message, self.retryable = provider, message, retryable


class STTStream(ABC):
    provider = "stt"
    timeout_s = 20.0

    def __init__(self) -> None:
        self.last_latency_ms: float | None = None

    @abstractmethod
    async def push(self, pcm16_16k: bytes) -> None: ...

    @abstractmethod
    async def _finish(self) -> str: ...

    async def finish(self) -> str:
        """The final transcript of the current utterance; the stream is then ready for the
        next one. Vendor failures become STTError."""
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                text = await self._finish()
        except STTError:
            raise
        except TimeoutError as exc:
            raise STTError(
                self.provider, f"no transcript within {self.timeout_s:.0f}s", retryable=True
            ) from exc
        except Exception as exc:
            raise STTError(self.provider, f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.last_latency_ms = (time.perf_counter() - start) * 1000
        return text.strip()

    @abstractmethod
    async def reset(self) -> None: ...

    async def aclose(self) -> None:
        return None


class STTProvider(ABC):
    name = "stt"
    streaming = False

    @abstractmethod
    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream: ...

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
