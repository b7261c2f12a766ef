"""Audio between Opus RTP and the pipeline's PCM16.

In: aiortc decodes Opus to 48 kHz stereo s16 frames; `Downmix` makes them 16 kHz mono PCM16,
the rate the pipeline's VAD and STT run at (no further resampling in the session).
Out: `ReplyTrack` is the outbound audio track. The pipeline pushes 48 kHz mono PCM16 (paced
by its Speaker at most 240 ms ahead of real time); the track hands aiortc one 20 ms frame per
20 ms of wall clock (silence when there is nothing to say) and `clear()` drops what is
buffered at once (barge-in)."""

from __future__ import annotations

import asyncio
import fractions
import time

from aiortc import MediaStreamTrack
from av import AudioFrame, AudioResampler

IN_RATE = 16000  # what the pipeline receives
OUT_RATE = 48000  # what the pipeline sends (Opus runs at 48 kHz)
FRAME_S = 0.02
OUT_SAMPLES = int(OUT_RATE * FRAME_S)  # 960
OUT_BYTES = OUT_SAMPLES * 2
TIME_BASE = fractions.Fraction(1, OUT_RATE)
SILENCE = bytes(OUT_BYTES)


class Downmix:
    """Decoded frames (any rate, any layout) -> PCM16 mono at `rate` (16 kHz)."""

    def __init__(self, rate: int = IN_RATE) -> None:
        self._resampler = AudioResampler(format="s16", layout="mono", rate=rate)

    def pcm(self, frame: AudioFrame) -> bytes:
        out = self._resampler.resample(frame)
        return b"".join(bytes(f.planes[0])[: f.samples * 2] for f in out)


class ReplyTrack(MediaStreamTrack):
    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._buf = bytearray()
        self._start: float | None = None
        self._n = 0  # frames handed out
        self.sent_audio_frames = 0  # frames that carried reply audio (not silence)

    def push(self, pcm: bytes) -> None:
        self._buf += pcm

    def clear(self) -> None:
        self._buf.clear()

    @property
    def buffered_ms(self) -> float:
        return len(self._buf) / 2 / OUT_RATE * 1000

    async def recv(self) -> AudioFrame:
        now = time.monotonic()
        if self._start is None or now - (self._start + self._n * FRAME_S) > 0.2:
            self._start, self._n = now - self._n * FRAME_S, self._n  # late (GC, load): re-anchor
        due = self._start + self._n * FRAME_S
        if due > now:
            await asyncio.sleep(due - now)
        if len(self._buf) >= OUT_BYTES:
            data = bytes(self._buf[:OUT_BYTES])
            del self._buf[:OUT_BYTES]
            self.sent_audio_frames += 1
        elif self._buf:
            data = bytes(self._buf) + SILENCE[len(self._buf) :]
            self._buf.clear()
            self.sent_audio_frames += 1
        else:
            data = SILENCE
        frame = AudioFrame(format="s16", layout="mono", samples=OUT_SAMPLES)
        frame.planes[0].update(data)
        frame.sample_rate = OUT_RATE
        frame.time_base = TIME_BASE
        frame.pts = self._n * OUT_SAMPLES
        self._n += 1
        return frame
