"""Speech-to-text interface. The gateway's VAD decides where an utterance ends; a stream
gets the utterance's audio (`feed`) and returns its text (`finish`).

The base owns the fault handling: `finish` has a time-out, vendor errors become STTError, a
vendor `push` that raises marks the utterance failed (its `finish` raises, the next utterance
starts afresh) instead of breaking the caller's audio input, and a provider whose `open`
raises gives a stream that fails each utterance with that error (see `open_stream`)."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

PartialCallback = Callable[[str], Awaitable[None]]


class STTError(Exception):
    def __init__(self, provider: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(f"{provider} STT: {message}")
        self.provider, self.message, self.retryable = provider, message, retryable


def as_stt_error(provider: str, exc: BaseException) -> STTError:
    if isinstance(exc, STTError):
        return exc
    if isinstance(exc, TimeoutError):
        return STTError(provider, "timed out", retryable=True)
    return STTError(provider, f"{type(exc).__name__}: {exc}", retryable=True)


class STTStream(ABC):
    provider = "stt"
    timeout_s = 20.0  # set per provider by STTProvider.open_stream
    input_rate = 16000  # the caller's rate before resampling (8000: narrowband phone speech)

    def __init__(self) -> None:
        self.last_latency_ms: float | None = None
        self.failed: STTError | None = None  # a push of the current utterance failed
        self.speculated = False  # set by finish(): the last speculation covers the utterance
        self.speculation_used = 0  # utterances whose speculative transcript was the final one

    def speculate(
        self, pad_ms: int = 300, *, retry_looped: bool = False
    ) -> asyncio.Future[str] | None:
        """The caller paused: start decoding the utterance so far, followed by `pad_ms` of
        silence (what the final decode will have), and return its text's future (never
        raising; "" on failure). None: this vendor cannot (a streaming vendor gets there by
        itself). `retry_looped`: a text that looks looped may be decoded again (the pause that
        may end the turn, whose transcript the reply waits for; not a barge-in check, which
        must answer quickly). Vendor hook."""
        return None

    @property
    def speculation_final(self) -> bool:
        """Whether a `speculate()` transcript becomes the turn's final one when no speech
        follows (`finish(speculated=True)`), so that the reply waits for it anyway. Vendor
        hook."""
        return False

    def speculation(self) -> asyncio.Future[str] | None:
        """The newest `speculate()` decode (a newer one cancels an older one: more of the same
        speech), or None. Vendor hook."""
        return None

    @abstractmethod
    async def push(self, pcm16_16k: bytes) -> None:
        """Vendor hook: take 20 ms of audio. Must not block on the network (queue instead)."""

    def push_now(self, pcm16_16k: bytes) -> bool:
        """Vendor hook: take 20 ms of audio without awaiting (a buffer append, a queue put)
        and return True, if this vendor can; False (the default): `push` takes it from the
        call's reader task. What it saves is measured in docs/benchmarks.md (`voice_concurrency`): a
        frame of speech handled in the socket's read callback (`InputPath.now`)
        instead of waking the reader."""
        return False

    def feed_now(self, pcm16_16k: bytes) -> bool:
        """`push_now`, with failures held like `feed`'s; False: call `feed` instead."""
        if self.failed is not None:
            return True  # dropped, as `feed` would
        try:
            return self.push_now(pcm16_16k)
        except Exception as exc:
            self.failed = as_stt_error(self.provider, exc)
            log.warning("%s; dropping the rest of the utterance", self.failed)
            return True

    async def feed(self, pcm16_16k: bytes) -> None:
        """`push`, with a vendor failure held until `finish` (the audio path never raises)."""
        if self.failed is not None:
            return
        try:
            await self.push(pcm16_16k)
        except Exception as exc:
            self.failed = as_stt_error(self.provider, exc)
            log.warning("%s; dropping the rest of the utterance", self.failed)

    @abstractmethod
    async def _finish(self) -> str: ...

    async def finish(self, *, speculated: bool = False) -> str:
        """The final transcript of the current utterance; the stream is then ready for the
        next one. Vendor failures and time-outs become STTError. `speculated`: no speech
        arrived since the last `speculate()`, so a vendor may answer with its result."""
        start = time.perf_counter()
        self.speculated = speculated
        try:
            if self.failed is not None:
                failed, self.failed = self.failed, None
                await self._reset_quietly()
                raise failed
            async with asyncio.timeout(self.timeout_s):
                text = await self._finish()
        except STTError:
            raise
        except TimeoutError as exc:
            await self._reset_quietly()
            raise STTError(
                self.provider, f"no transcript within {self.timeout_s:g}s", retryable=True
            ) from exc
        except Exception as exc:
            raise STTError(self.provider, f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.last_latency_ms = (time.perf_counter() - start) * 1000
        return text.strip()

    async def _reset_quietly(self) -> None:
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.reset()
        except Exception as exc:
            log.warning("%s STT: reset after a failure failed: %s", self.provider, exc)

    @abstractmethod
    async def reset(self) -> None: ...

    async def aclose(self) -> None:
        return None


class BrokenStream(STTStream):
    """The stream of a provider whose `open` failed: every utterance fails with that error
    (the caller hears an apology and can still type), none raises into the call."""

    def __init__(self, error: STTError) -> None:
        super().__init__()
        self.error = error
        self.provider = error.provider

    async def push(self, pcm16_16k: bytes) -> None:
        raise self.error

    async def _finish(self) -> str:
        raise self.error

    async def reset(self) -> None:
        return None


class STTProvider(ABC):
    name = "stt"
    streaming = False
    timeout_s = 20.0  # finish() time-out of its streams (VG_STT_TIMEOUT_S)

    @abstractmethod
    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        """Vendor hook: a stream for one call."""

    def open_stream(
        self, *, on_partial: PartialCallback | None = None, input_rate: int = 16000
    ) -> STTStream:
        """A stream for one call, with this provider's time-out; never raises. `input_rate`:
        the rate the caller's audio had before it was resampled to 16 kHz."""
        try:
            stream = self.open(on_partial=on_partial)
        except Exception as exc:
            log.warning("%s STT: cannot open a stream: %s", self.name, exc)
            stream = BrokenStream(as_stt_error(self.name, exc))
        stream.timeout_s = self.timeout_s
        stream.input_rate = input_rate
        return stream

    def backlog(self) -> int:
        """Decodes waiting for a free worker of this process (a local model on the CPU): a
        sign the process's cores are all taken. 0 for a vendor."""
        return 0

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
