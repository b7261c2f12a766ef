"""pipeline/speech.py: mid-reply, while the next audio is not ready, the speaker sends silence
so the client's playback never runs dry (an underrun shifts the echo path the canceller has
learned); none before the first audio, after the reply or after a barge-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from voice_gateway.pipeline.speech import FRAME_MS, Speaker
from voice_gateway.tts.base import TTSProvider

RATE = 16000
FRAME = RATE * FRAME_MS // 1000 * 2


def tone(ms: int) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (np.sin(2 * np.pi * 300 * t) * 8000 + 3000).astype("<i2").tobytes()  # no zero frame


class SlowTTS(TTSProvider):
    """Per sentence: `first_s` before any audio, then 200 ms of tone, `stall_s`, 200 ms more."""

    name = "slow"
    streams_audio = True  # each piece is sent as it comes

    def __init__(self, first_s: float = 0.0, stall_s: float = 0.0) -> None:
        super().__init__(timeout_s=5.0)
        self.first_s, self.stall_s = first_s, stall_s
        self.made: list[bytes] = []

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        await asyncio.sleep(self.first_s)
        for i, pause in enumerate((self.stall_s, 0.0)):
            pcm = tone(200 + i * 20)  # the two halves differ: their order shows
            self.made.append(pcm)
            yield pcm
            await asyncio.sleep(pause)


class Sink:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def __call__(self, pcm: bytes) -> None:
        self.frames += [pcm[i : i + FRAME] for i in range(0, len(pcm), FRAME)]

    def silent(self) -> list[int]:
        return [i for i, f in enumerate(self.frames) if not any(f)]

    def speech(self) -> bytes:
        return b"".join(f for f in self.frames if any(f))


async def test_a_stalled_sentence_is_bridged_with_silence_not_an_underrun() -> None:
    tts, sink = SlowTTS(first_s=0.3, stall_s=0.5), Sink()
    speaker = Speaker(tts, RATE, sink)
    speaker.say("one", None)
    speaker.close()
    await speaker.run()
    assert sink.speech() == b"".join(tts.made)  # every sample of speech, in order
    silent, last = sink.silent(), max(i for i, f in enumerate(sink.frames) if any(f))
    assert silent and silent[0] > 0  # nothing before the first audio: that wait is no gap
    assert len(sink.frames) - 1 - last <= 1  # nor after the last (but the TTS's own end pad)
    assert 300 <= speaker.filled_ms <= 560, speaker.filled_ms  # ~500 ms stall - 160 ms ahead
    assert speaker.underrun_ms < 100, speaker.underrun_ms  # the old code: ~340 ms


async def test_waiting_for_the_next_sentence_fills_in_batches_and_stops_at_the_end() -> None:
    sink = Sink()
    speaker = Speaker(SlowTTS(), RATE, sink)
    fills, fill = 0, speaker._fill

    def counted() -> None:
        nonlocal fills
        fills += 1
        fill()

    speaker._fill = counted  # type: ignore[method-assign]
    speaker.say("one", None)
    task = asyncio.create_task(speaker.run())
    await asyncio.sleep(1.2)  # the model writing its next sentence
    speaker.say("two", None)
    speaker.close()
    await task
    assert speaker.filled_ms >= 600 and speaker.underrun_ms < 100, vars(speaker)
    assert speaker.segments[1].start_ms >= 1000  # the second sentence starts after the silence
    assert fills < 25  # 100 ms at a time once the wait is long, not a timer per 20 ms frame
    frames = len(sink.frames)
    await asyncio.sleep(0.3)
    assert len(sink.frames) == frames  # the reply is over: nothing more is sent


async def test_a_barge_in_during_the_wait_stops_the_silence() -> None:
    sink = Sink()
    speaker = Speaker(SlowTTS(), RATE, sink)
    speaker.say("one", None)
    task = asyncio.create_task(speaker.run())
    await asyncio.sleep(0.8)
    assert len(sink.silent()) >= 10  # filling while the model thinks (the old code: 1, the pad)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    frames = len(sink.frames)
    await asyncio.sleep(0.4)
    assert len(sink.frames) == frames
