"""pipeline/speech.py: Speaker.first_audio, what a reply waits on after its first sentence
(the first frame is out, or the speaker has nothing to say, or the bound has passed)."""

from __future__ import annotations

import asyncio

from tests.support.fault_providers import Faults, FaultTTS
from tests.unit.test_speaker_keeps_playing import SlowTTS
from voice_gateway.pipeline.speech import Speaker
from voice_gateway.tts.espeak import EspeakTTS


async def _sink(pcm: bytes) -> None:
    return None


async def test_first_audio_returns_once_the_first_frame_is_sent() -> None:
    sent: list[bytes] = []

    async def send(pcm: bytes) -> None:
        sent.append(pcm)

    sp = Speaker(EspeakTTS(), 16000, send)
    task = asyncio.create_task(sp.run())
    sp.say("Sure, I can check that for you,", "m1")
    await asyncio.wait_for(sp.first_audio(timeout_s=10.0), 10.0)
    assert sp.first_audio_at is not None and sent
    await sp.first_audio()  # at once from now on
    sp.close()
    await task


async def test_first_audio_does_not_wait_for_a_voice_that_failed() -> None:
    failed: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        failed.append(exc)

    sp = Speaker(FaultTTS(Faults(tts="start")), 16000, _sink, on_tts_error=on_error)
    task = asyncio.create_task(sp.run())
    sp.say("Hello there.", "m1")
    await asyncio.wait_for(sp.first_audio(timeout_s=10.0), 5.0)  # not the 10 s bound
    assert sp.first_audio_at is None and failed
    sp.close()
    await task


async def test_first_audio_waits_no_longer_than_its_bound() -> None:
    sp = Speaker(SlowTTS(first_s=5.0), 16000, _sink)
    task = asyncio.create_task(sp.run())
    sp.say("Hello there.", "m1")
    await asyncio.wait_for(sp.first_audio(timeout_s=0.05), 2.0)
    assert sp.first_audio_at is None  # still synthesizing: the reply goes on regardless
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
