"""Fault-injecting providers: subclasses of our own STT, TTS and LLM base classes whose failure
mode a test switches at run time (`Faults`), so the base classes' time-outs, retries, error
mapping and fallbacks run for real.

Modes: "ok"; "start" (fail before any output); "mid" (fail after some output: a partial
transcript, some audio, some text); "hang" (never answer: the time-outs must fire).
The TTS speaks a tone whose pitch encodes the text (`tone_hz`), so a test can tell which
phrase (e.g. the apology) it received."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agents.llm import LLMChunk, LLMError, LLMProvider, LLMRequest, Usage
from voice_gateway.stt import register_stt
from voice_gateway.stt.base import PartialCallback, STTProvider, STTStream
from voice_gateway.tts import register_tts
from voice_gateway.tts.base import TTSProvider

Mode = Literal["ok", "start", "mid", "hang", "open"]  # open: the STT cannot open a stream
HEARD = "what is the weather like today"
REPLY = "It is sunny and warm. Enjoy your day."
TTS_RATE = 16000
MS_PER_CHAR = 10  # short phrases keep the (real-time paced) replies quick
_names = itertools.count()


@dataclass
class Faults:
    """What each kind does now; counters of what was asked of it."""

    stt: Mode = "ok"
    tts: Mode = "ok"
    llm: Mode = "ok"
    calls: dict[str, int] = field(default_factory=lambda: {"stt": 0, "tts": 0, "llm": 0})

    def reset(self) -> None:
        self.stt = self.tts = self.llm = "ok"


async def _forever() -> None:
    await asyncio.Event().wait()


# ---- STT ------------------------------------------------------------------------------------


class FaultSTTStream(STTStream):
    provider = "fault-stt"

    def __init__(self, faults: Faults, on_partial: PartialCallback | None) -> None:
        super().__init__()
        self.faults, self.on_partial = faults, on_partial
        self.pushes = 0

    async def push(self, pcm16_16k: bytes) -> None:
        self.pushes += 1
        mode = self.faults.stt
        if mode == "start":
            raise ConnectionError("the STT vendor refused the audio")
        if mode == "mid" and self.pushes == 3 and self.on_partial is not None:
            await self.on_partial(HEARD.split()[0])
        if mode == "mid" and self.pushes >= 6:
            raise ConnectionError("the STT vendor dropped the stream")

    async def _finish(self) -> str:
        self.faults.calls["stt"] += 1
        heard, self.pushes = self.pushes, 0
        if self.faults.stt == "hang":
            await _forever()
        return HEARD if heard else ""

    async def reset(self) -> None:
        self.pushes = 0


class FaultSTT(STTProvider):
    name = "fault-stt"

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        if self.faults.stt == "open":
            raise ConnectionError("the STT vendor refused the connection")
        return FaultSTTStream(self.faults, on_partial)


# ---- TTS ------------------------------------------------------------------------------------


def tone_hz(text: str) -> int:
    """The pitch FaultTTS speaks `text` at (200-990 Hz, by a hash of the text)."""
    return 200 + (zlib.crc32(text.strip().encode()) % 80) * 10


def tone(text: str, rate: int = TTS_RATE) -> bytes:
    n = len(text.strip()) * MS_PER_CHAR * rate // 1000
    t = np.arange(n) / rate
    return (np.sin(2 * np.pi * tone_hz(text) * t) * 8000).astype("<i2").tobytes()


class FaultTTS(TTSProvider):
    name = "fault-tts"
    native_rate = TTS_RATE
    streams_audio = True

    def __init__(self, faults: Faults) -> None:
        super().__init__()
        self.faults = faults

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        self.faults.calls["tts"] += 1
        mode, audio = self.faults.tts, tone(text)
        if mode == "start":
            raise ConnectionError("the TTS vendor is down")
        if mode == "hang":
            await _forever()
        half = len(audio) // 4 * 2
        yield audio[:half]
        if mode == "mid":
            raise ConnectionError("the TTS vendor dropped the stream")
        yield audio[half:]

    async def warmup(self) -> None:
        return None


# ---- LLM ------------------------------------------------------------------------------------


class FaultLLM(LLMProvider):
    name = "fault-llm"

    def __init__(self, faults: Faults, reply: str = REPLY) -> None:
        super().__init__()
        self.faults, self.reply = faults, reply

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.faults.calls["llm"] += 1
        mode = self.faults.llm
        if mode == "start":
            raise LLMError(self.name, "HTTP 503: overloaded", retryable=True)
        if mode == "hang":
            await _forever()
        words = self.reply.split(" ")
        for i, word in enumerate(words):
            if mode == "mid" and i == len(words) - 2:  # after the first sentence
                raise ConnectionError("the model endpoint dropped the stream")
            yield LLMChunk(text=word + " ")
        yield LLMChunk(usage=Usage(10, 10), finish_reason="stop")


def install(faults: Faults) -> str:
    """Register the fault STT and TTS under a fresh name (VG_STT / VG_TTS) and return it."""
    name = f"fault{next(_names)}"
    register_stt(name, lambda: FaultSTT(faults))
    register_tts(name, lambda: FaultTTS(faults))
    return name
