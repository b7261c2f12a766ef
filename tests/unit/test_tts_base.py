"""tts/base.py: resampling of streamed audio (chunks of any size), time-outs, one retry before
any audio, errors mapped to TTSError. Providers here subclass our TTSProvider base."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from voice_gateway.audio import pcm_to_array
from voice_gateway.tts.base import TTSError, TTSProvider

TONE = (np.sin(2 * np.pi * 440 * np.arange(24000) / 24000) * 8000).astype("<i2").tobytes()


class ChunkedTTS(TTSProvider):
    """One second of a 440 Hz tone at 24 kHz, streamed in chunks of the given sizes."""

    name = "chunked"
    native_rate = 24000
    streams_audio = True

    def __init__(self, sizes: list[int], fail_first: int = 0, stall_s: float = 0.0) -> None:
        super().__init__(timeout_s=0.5)
        self.sizes, self.fail_first, self.stall_s, self.calls = sizes, fail_first, stall_s, 0

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise ConnectionError("vendor hung up")
        if self.stall_s:
            await asyncio.sleep(self.stall_s)
        i = k = 0
        while i < len(TONE):
            n = self.sizes[k % len(self.sizes)]
            yield TONE[i : i + n]
            i, k = i + n, k + 1


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
async def test_odd_sized_chunks_give_the_same_audio(rate: int) -> None:
    even = await ChunkedTTS([4800]).synthesize_all("x", rate)
    odd = await ChunkedTTS([4801, 1, 333, 2047]).synthesize_all("x", rate)
    assert odd == even  # no byte lost or shifted at chunk boundaries
    samples = pcm_to_array(even)
    assert abs(len(samples) - rate) <= rate // 100  # one second, at the rate asked for
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    assert np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))] == pytest.approx(
        440, abs=3
    )


async def test_one_retry_before_any_audio() -> None:
    tts = ChunkedTTS([4800], fail_first=1)
    assert len(await tts.synthesize_all("x", 16000)) > 30000
    assert tts.calls == 2 and tts.last_ttfb_ms is not None
    with pytest.raises(TTSError, match="chunked TTS: ConnectionError: vendor hung up"):
        await ChunkedTTS([4800], fail_first=2).synthesize_all("x", 16000)


async def test_no_audio_in_time_is_a_tts_error() -> None:
    with pytest.raises(TTSError, match="no audio in time"):
        await ChunkedTTS([4800], stall_s=5.0).synthesize_all("x", 16000)


async def test_blank_text_makes_no_request() -> None:
    tts = ChunkedTTS([4800])
    assert await tts.synthesize_all("  \n ", 16000) == b""
    assert tts.calls == 0
