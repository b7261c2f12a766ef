"""The call's input path (pipeline/input.py) by what goes in and out: whichever way a frame
comes in (the transport's synchronous sink `now`, or `receive` and `audio`), STT gets the
same audio in the same order and the call the same turn events, no frame handled twice: a
frame `now` declines is finished by `audio` from where `now` stopped. The real TurnDetector
(an exact energy VAD), a recording STT on our base class, 16 kHz and a phone's 8 kHz. A
recorded call's recording gets every frame once, as it came, either way in."""

from __future__ import annotations

import asyncio
import wave
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from voice_gateway.echo.base import NoCanceller
from voice_gateway.pipeline.input import InputPath
from voice_gateway.pipeline.overlap import BargeIn, BargeInRules
from voice_gateway.recording import CallRecording
from voice_gateway.stt.base import STTStream
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import TurnEvent
from voice_gateway.vad.base import VAD


class EnergyVAD(VAD):
    name = "energy"

    def is_speech(self, frame: bytes) -> bool:
        return bool(np.abs(np.frombuffer(frame, "<i2")).max() > 200)


class RecordingSTT(STTStream):
    def __init__(self, now: bool) -> None:
        super().__init__()
        self.now, self.audio = now, bytearray()

    async def push(self, pcm16_16k: bytes) -> None:
        self.audio += pcm16_16k

    def push_now(self, pcm16_16k: bytes) -> bool:
        if self.now:
            self.audio += pcm16_16k
        return self.now

    async def _finish(self) -> str:
        return ""

    async def reset(self) -> None:
        return None


class Tasks:
    def create_task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.ensure_future(coro)


def call_audio(rate: int) -> list[bytes]:
    """Silence, 1 s of speech, silence, 0.6 s of speech, silence: 20 ms frames at `rate`."""
    n = rate // 50
    t = np.arange(n) / rate
    tone = (3000 * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()
    quiet = bytes(n * 2)
    return [quiet] * 10 + [tone] * 50 + [quiet] * 40 + [tone] * 30 + [quiet] * 40


async def run(
    rate: int, *, sink: bool, stt_now: bool, recording: CallRecording | None = None
) -> tuple[bytes, list[str], int]:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200))
    stt = RecordingSTT(stt_now)
    rules = BargeInRules(360, 1000, frozenset(), False)
    events: list[str] = []

    async def on_event(ev: TurnEvent) -> None:
        events.append(f"{type(ev).__name__}@{getattr(ev, 'at_ms', '')}")

    barge = BargeIn(rules, det, stt, Tasks(), NoCanceller())
    inp = InputPath((rate, 16000), det, NoCanceller(), stt, barge, on_event, "", recording)
    taken = 0
    for frame in call_audio(rate):
        pcm = bytes(frame)  # as a socket delivers it: a new object per frame
        if sink and inp.now(pcm):
            taken += 1
        else:
            await inp.audio(pcm)  # declined (or no sink): through `receive`
    return bytes(stt.audio), events, taken


@pytest.mark.parametrize("rate", [16000, 8000])
@pytest.mark.parametrize("stt_now", [False, True])
async def test_both_ways_in_give_stt_and_the_call_the_same(rate: int, stt_now: bool) -> None:
    reader = await run(rate, sink=False, stt_now=stt_now)
    both = await run(rate, sink=True, stt_now=stt_now)
    audio, events, taken = both
    assert audio == reader[0] and len(audio) > 16000 * 2  # the speech, once, in order
    assert events == reader[1]
    assert [e.split("@")[0] for e in events].count("SpeechStopped") == 2
    # the sink took every frame that made no event and that STT could take at once
    assert taken > (150 if stt_now else 60)


async def test_odd_sizes_go_through_the_reader_and_are_cut_into_frames() -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200))
    stt = RecordingSTT(False)
    barge = BargeIn(BargeInRules(360, 1000, frozenset(), False), det, stt, Tasks())

    async def on_event(ev: TurnEvent) -> None:
        return None

    inp = InputPath((16000, 16000), det, NoCanceller(), stt, barge, on_event)
    assert not inp.now(bytes(100))  # not a 20 ms frame: declined
    await inp.audio(bytes(100))
    assert not inp.now(bytes(640))  # 100 bytes wait for the rest: the order is kept
    await inp.audio(bytes(1180))  # 1280 in all: two frames
    assert det.now_ms == 40 and inp.now(bytes(640)) and det.now_ms == 60


@pytest.mark.parametrize("rate", [16000, 8000])
async def test_a_recording_gets_every_frame_once(rate: int, tmp_path: Path) -> None:
    rec = CallRecording(tmp_path / "call.wav", (rate, rate), "call-1")
    *_, taken = await run(rate, sink=True, stt_now=True, recording=rec)
    await asyncio.to_thread(rec.close)
    assert taken > 150  # most frames came in through the sink
    with wave.open(str(tmp_path / "call.wav"), "rb") as w:
        assert (w.getnchannels(), w.getframerate()) == (2, rate)
        frames = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert frames[0::2].tobytes() == b"".join(call_audio(rate))
