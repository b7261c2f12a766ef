"""WebRTC's AEC3 through the `livekit` wheel's AudioProcessingModule (Apache-2.0, manylinux,
offline). Chosen over pyaec (speexdsp) by bench/echo_cancel.py: see docs/turn_taking.md."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from voice_gateway.echo.base import EchoCanceller
from voice_gateway.echo.doubletalk import DoubleTalk

RATE = 16000
TEN_MS = RATE // 100 * 2  # bytes of one 10 ms frame


class ApmCanceller(EchoCanceller):
    """The reference is scheduled on the wall clock: each 10 ms of reply audio is due when the
    caller plays it (sent audio queues up behind what is still playing), and a microphone
    frame is paired with the reference due at its arrival. Reference that fell more than
    STALE_S behind (a client that sends no audio while it listens) is dropped, so an old
    reply is never taken for the far end of new speech. A frame louder than the reply's echo
    can be (echo/doubletalk.py) is returned as it is: AEC3 would suppress the caller in it."""

    name = "webrtc-aec3"
    STALE_S = 0.5
    TAIL_S = 0.6  # the longest echo path served: after that, nothing played can come back

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, guard: bool = True) -> None:
        from livekit import rtc

        self._rtc = rtc
        self.apm = rtc.AudioProcessingModule(
            echo_cancellation=True,
            noise_suppression=False,
            high_pass_filter=True,
            auto_gain_control=False,
        )
        self.clock = clock
        self._far: deque[tuple[float, bytes]] = deque()  # (due, 10 ms) not yet paired
        self._far_rest = b""
        self._play_end = 0.0
        self._silence = bytes(TEN_MS)
        self._last_ref = -1e9  # when reference audio was last due
        self._in_energy = self._out_energy = 0.0
        self.cancelled_s = 0.0  # microphone audio processed against real reference
        self.double_talk = DoubleTalk(int(self.TAIL_S * 100)) if guard else None
        self.double_s = 0.0  # of it, double talk: the caller over the reply

    def _frame(self, pcm: bytes) -> Any:
        return self._rtc.AudioFrame(pcm, RATE, 1, len(pcm) // 2)

    def far(self, pcm: bytes) -> None:
        buf = self._far_rest + pcm
        n = len(buf) - len(buf) % TEN_MS
        due = max(self.clock(), self._play_end)
        for i in range(0, n, TEN_MS):
            self._far.append((due, buf[i : i + TEN_MS]))
            due += 0.01
        self._play_end = due
        self._far_rest = buf[n:]

    def clear(self) -> None:
        self._far.clear()
        self._far_rest = b""
        self._play_end = 0.0

    @property
    def active(self) -> bool:
        return bool(self._far)

    def _reference(self, now: float) -> bytes:
        while self._far and self._far[0][0] < now - self.STALE_S:
            self._far.popleft()
        if self._far and self._far[0][0] <= now:
            self.cancelled_s += 0.01
            self._last_ref = now
            pcm = self._far.popleft()[1]
            if self.double_talk is not None:
                self.double_talk.reference(pcm)
            return pcm
        if self.double_talk is not None:
            self.double_talk.reference(None)
        return self._silence

    def idle(self, now: float) -> bool:
        """Nothing played can echo now and no reference is due: AEC3 has nothing to remove."""
        return now - self._last_ref > self.TAIL_S and not (self._far and self._far[0][0] <= now)

    def near(self, frame: bytes) -> bytes:
        now = self.clock()
        if self.idle(now):
            # AEC3 is not run between replies: its four calls a frame (two 10 ms halves,
            # reference and microphone, each a protobuf request to the livekit FFI) would be the
            # phone path's largest cost, ~1/3 of the event loop's time per phone frame
            # (py-spy, bench/phone_capacity.py), for audio it returns untouched.
            # Render and capture are skipped together, so what it learned of the echo path
            # (and their alignment) is there for the next reply.
            if self.double_talk is not None:
                self.double_talk.forget()
            return frame  # the microphone as it is (and not counted in `energy`, as before)
        out = bytearray()
        for i in range(0, len(frame) - TEN_MS + 1, TEN_MS):
            self.apm.process_reverse_stream(self._frame(self._reference(now)))
            mic = self._frame(frame[i : i + TEN_MS])
            self.apm.process_stream(mic)
            out += bytes(mic.data.cast("B"))
        if now - self._last_ref > self.TAIL_S:
            return frame  # stale reference only: the microphone as it is
        cleaned = bytes(out) + frame[len(out) :]
        if self.double_talk is not None and self.double_talk.over_echo(frame):
            self.double_s += len(frame) / (2 * RATE)
            cleaned = frame  # the caller is in it: nothing of it is taken as echo
        self._in_energy += _energy(frame)
        self._out_energy += _energy(cleaned)
        return cleaned

    def energy(self) -> tuple[float, float]:
        return self._in_energy, self._out_energy


def _energy(pcm: bytes) -> float:
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return float(x @ x)
