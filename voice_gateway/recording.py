"""One call's recording: both sides in a 2-channel PCM16 WAV at the call's input rate, written
to disk as the call goes.

Channel 1 is the caller as received (before resampling and echo cancellation); channel 2 is
the reply audio sent to the caller. Both run on the call's audio clock, the caller's samples:
sent audio waits in `_far` until the caller's audio of the same moment arrives, and the two
leave together as interleaved frames. The speaker sends up to its lead (pipeline/speech.py
MAX_LEAD_MS) ahead of that clock, a cached phrase all at once; `cut()` (barge-in: the client
drops what it had not played) drops what is still ahead of the clock, so audio the caller never
heard is not in the file. A client that sends no audio does not stop the clock for good: past
FAR_AHEAD_S of sent audio, it is written against silence.

The event loop's share is an interleave per frame and a queue put per BLOCK_S; a writer thread
does the file writes (the `wave` module: the header is patched on each block, so the file is a
valid WAV at every moment). The queue is bounded (QUEUE_BLOCKS): if the disk falls that far
behind, blocks are dropped and written later as silence of the same length, so the channels
and the clock stay aligned and memory stays bounded.
"""

from __future__ import annotations

import logging
import queue
import threading
import wave
from pathlib import Path

import numpy as np

from voice_gateway.audio import StreamingResampler

log = logging.getLogger(__name__)
BLOCK_S = 0.5  # interleaved audio handed to the writer at a time
QUEUE_BLOCKS = 60  # the writer's backlog at most (30 s of audio)
FAR_AHEAD_S = 5.0  # sent audio ahead of the caller's clock before it is written on silence
Block = tuple[int, bytes]  # (frames of silence owed first, interleaved frames)


class CallRecording:
    __slots__ = (
        "_far",
        "_gap",
        "_pending",
        "_queue",
        "_resampler",
        "_thread",
        "block_bytes",
        "consent",
        "failed",
        "frames",
        "path",
        "rate",
        "record_id",
    )  # fmt: skip

    def __init__(
        self,
        path: Path,
        rates: tuple[int, int],  # (input, output) sample rates of the call
        record_id: str,
        consent: str | None = None,
    ) -> None:
        input_rate, output_rate = rates
        self.path, self.rate, self.record_id, self.consent = path, input_rate, record_id, consent
        self._resampler = (
            StreamingResampler(output_rate, input_rate) if output_rate != input_rate else None
        )
        self.block_bytes = int(input_rate * BLOCK_S) * 4
        self.frames = 0  # on the call's clock: frames handed to the writer (or owed as gap)
        self.failed = False  # the file could not be written
        self._far = bytearray()  # sent audio (at the input rate) from the clock on
        self._pending = bytearray()  # interleaved frames not yet handed to the writer
        self._gap = 0  # frames dropped on a full queue, to be written as silence
        self._queue: queue.Queue[Block | None] = queue.Queue(QUEUE_BLOCKS)
        self._thread = threading.Thread(target=self._write, name="vg-recording", daemon=True)
        self._thread.start()

    def heard(self, pcm: bytes) -> None:
        """The caller's audio as received (PCM16 at the input rate, any even length)."""
        n = len(pcm) - len(pcm) % 2
        far = self._far[:n]
        del self._far[:n]
        if len(far) < n:
            far += bytes(n - len(far))
        self._add(pcm[:n], bytes(far))

    def played(self, pcm: bytes) -> None:
        """Reply audio sent to the caller (PCM16 at the output rate)."""
        self._far += self._resampler.process(pcm) if self._resampler is not None else pcm
        ahead = len(self._far) - int(self.rate * FAR_AHEAD_S) * 2
        if ahead > 0:  # no caller audio comes: the clock moves on with the reply
            self.heard(bytes(ahead))

    def cut(self) -> None:
        """The client dropped the audio it had not played yet (barge-in)."""
        self._far.clear()

    def _add(self, near: bytes, far: bytes) -> None:
        frame = np.empty(len(near), dtype="<i2")
        frame[0::2] = np.frombuffer(near, dtype="<i2")
        frame[1::2] = np.frombuffer(far, dtype="<i2")
        self._pending += frame.tobytes()
        if len(self._pending) >= self.block_bytes:
            self._flush()

    def _flush(self) -> None:
        data, self._pending = bytes(self._pending), bytearray()
        self.frames += len(data) // 4
        try:
            self._queue.put_nowait((self._gap, data))
            self._gap = 0
        except queue.Full:
            if not self._gap:
                log.warning("recording %s: the disk is behind, writing silence", self.record_id)
            self._gap += len(data) // 4

    def close(self) -> None:
        """Write what is left (the sent audio past the clock too) and end the file; blocking:
        call it off the event loop (`asyncio.to_thread`)."""
        far = bytes(self._far)
        self._far.clear()
        if far:
            self._add(bytes(len(far)), far)
        if self._pending or self._gap:
            data, self._pending = bytes(self._pending), bytearray()
            self.frames += len(data) // 4
            self._queue.put((self._gap, data))
        self._queue.put(None)
        self._thread.join()

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with wave.open(str(self.path), "wb") as w:
                w.setnchannels(2)
                w.setsampwidth(2)
                w.setframerate(self.rate)
                while (block := self._queue.get()) is not None:
                    gap, data = block
                    if gap:
                        w.writeframes(bytes(gap * 4))
                    w.writeframes(data)
        except OSError as exc:
            log.error("recording %s not written: %s", self.record_id, exc)
            self.failed = True
            while self._queue.get() is not None:  # let the call go on
                pass
