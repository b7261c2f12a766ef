"""A primary STT with a fallback (VG_STT_FALLBACK), e.g. deepgram then whisper.

The wrapper keeps the utterance's audio; when the primary fails before its final transcript
(a push or finish error, or its time-out) the audio is replayed to the fallback, which
transcribes it instead, so the caller notices nothing but latency. After a failure the
primary is skipped for `cooldown_s` (no time-out paid on every turn while it is down)."""

from __future__ import annotations

import logging
import time
from collections import Counter

from voice_gateway.stt.base import (
    PartialCallback,
    STTError,
    STTProvider,
    STTStream,
    as_stt_error,
)

log = logging.getLogger(__name__)
MAX_REPLAY_BYTES = 60 * 32000  # a minute of 16 kHz PCM16: longer utterances keep their start


class FallbackSTT(STTProvider):
    def __init__(self, primary: STTProvider, fallback: STTProvider, cooldown_s: float = 30.0):
        self.primary, self.fallback, self.cooldown_s = primary, fallback, cooldown_s
        self.name = f"{primary.name}>{fallback.name}"
        self.streaming = primary.streaming
        self.timeout_s = primary.timeout_s + fallback.timeout_s
        self.served: Counter[str] = Counter()  # utterances transcribed, by provider
        self._skip_until = 0.0

    @property
    def primary_up(self) -> bool:
        return time.monotonic() >= self._skip_until

    def primary_failed(self, exc: Exception) -> None:
        self._skip_until = time.monotonic() + self.cooldown_s
        log.warning(
            "STT %s failed (%s); %s serves for the next %gs",
            self.primary.name,
            exc,
            self.fallback.name,
            self.cooldown_s,
        )

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return FallbackStream(self, on_partial)

    def backlog(self) -> int:
        return self.primary.backlog() + self.fallback.backlog()

    async def warmup(self) -> None:
        await self.fallback.warmup()  # must work: it is what keeps calls going
        try:
            await self.primary.warmup()
        except Exception as exc:
            self.primary_failed(exc)

    async def aclose(self) -> None:
        await self.primary.aclose()
        await self.fallback.aclose()


class FallbackStream(STTStream):
    def __init__(self, owner: FallbackSTT, on_partial: PartialCallback | None) -> None:
        super().__init__()
        self.owner, self.on_partial = owner, on_partial
        self.provider = owner.name
        self.primary = owner.primary.open_stream(on_partial=on_partial)
        self.backup: STTStream | None = None
        self._audio = bytearray()  # the utterance so far, for a replay to the fallback
        self._use_primary: bool | None = None  # decided per utterance, at its first audio
        self._primary_error: STTError | None = None

    @property
    def input_rate(self) -> int:
        return self.primary.input_rate

    @input_rate.setter
    def input_rate(self, rate: int) -> None:
        self.primary.input_rate = rate
        if self.backup is not None:
            self.backup.input_rate = rate

    async def push(self, pcm16_16k: bytes) -> None:
        if len(self._audio) < MAX_REPLAY_BYTES:
            self._audio += pcm16_16k
        if self._use_primary is None:
            self._use_primary = self.owner.primary_up
        if not self._use_primary:
            await self._backup().feed(pcm16_16k)
            return
        if self._primary_error is None:
            try:
                await self.primary.push(pcm16_16k)
            except Exception as exc:
                self._primary_error = as_stt_error(self.owner.primary.name, exc)

    def _backup(self) -> STTStream:
        if self.backup is None:
            self.backup = self.owner.fallback.open_stream(
                on_partial=self.on_partial, input_rate=self.primary.input_rate
            )
        return self.backup

    async def _finish(self) -> str:
        audio, self._audio = bytes(self._audio), bytearray()
        use_primary = self.owner.primary_up if self._use_primary is None else self._use_primary
        self._use_primary = None
        error, self._primary_error = self._primary_error, None
        if use_primary:
            if error is None:
                try:
                    text = await self.primary.finish()
                    self.owner.served[self.owner.primary.name] += 1
                    return text
                except STTError as exc:
                    error = exc
            else:
                await self.primary._reset_quietly()
            self.owner.primary_failed(error)
            backup = self._backup()
            await backup.reset()
            for i in range(0, len(audio), 640):
                await backup.feed(audio[i : i + 640])
        text = await self._backup().finish()
        self.owner.served[self.owner.fallback.name] += 1
        log.info("STT: utterance transcribed by the fallback %s", self.owner.fallback.name)
        return text

    async def reset(self) -> None:
        self._audio = bytearray()
        self._primary_error = None
        self._use_primary = None
        await self.primary.reset()
        if self.backup is not None:
            await self.backup.reset()

    async def aclose(self) -> None:
        await self.primary.aclose()
        if self.backup is not None:
            await self.backup.aclose()
