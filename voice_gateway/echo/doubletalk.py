"""Double talk: is the caller speaking over the reply, beyond what its echo can explain?

AEC3 suppresses a caller who talks over the reply while it has no echo path learned, and a
line with no echo at all (a handset: the phone cancels its own echo) never gives it one: on
the phone barge-in test it left 21 of 82 caller frames for the VAD to hear (60-70 dB of
the caller's speech removed), and the barge-in judge read that as echo removed. Yet an echo
is never louder than the reply, scaled by the echo path's coupling, which can be learned:
the microphone's level against the loudest reference of the echo window (TAIL_S), over
frames of loud reference. A frame more than MARGIN_DB above that is double talk: speech is
decided on the microphone as it is (bench/echo_cancel.py, `double_talk_guard`)."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque

import numpy as np

LOUD_DB = 50.0  # reference quieter than this (-40 dBFS) teaches nothing about the echo path
MARGIN_DB = 6.0  # a frame this far above the learned coupling holds more than echo
PRIOR_DB = 0.0  # until learned: an echo as loud as the reply (a frame must be louder)
LEARN = 50  # loud-reference frames (1 s) before the learned coupling replaces the prior
WINDOW = 150  # the coupling: 95th percentile of the last 150 loud-reference frames (3 s)
RISE_DB = 2.0  # a double-talk frame enters the window at most this far above the coupling:
# an echo path louder than learned (a speakerphone turned on) is learned in ~4 s of reply,
# while a caller talking over a reply on a line with no echo is still heard (bench)


def power_db(pcm: bytes) -> float:
    x = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return float(10 * np.log10(x @ x / max(len(x), 1) + 1.0))


class DoubleTalk:
    """Feed the reference as it is paired (`reference`, per 10 ms) and each microphone frame
    (`over_echo`, per 20 ms); `coupling_db` is the echo path's learned level."""

    def __init__(self, tail_frames: int) -> None:
        self._ref: deque[float] = deque(maxlen=tail_frames)  # 10 ms reference levels (dB)
        self._ratios: deque[float] = deque()  # the window, oldest first
        self._sorted: list[float] = []  # the same, sorted (its 95th percentile is read often)
        self._learned = 0
        self._peak = 0.0
        self.coupling_db = PRIOR_DB

    def reference(self, pcm: bytes | None) -> None:
        self._ref.append(power_db(pcm) if pcm is not None else 0.0)

    def forget(self) -> None:
        """No reference for longer than the echo window: none of it can still echo."""
        self._ref.clear()

    def over_echo(self, mic: bytes) -> bool:
        """The frame is louder than any echo of the reference could be: double talk."""
        ref_db = max(self._ref, default=0.0)
        if ref_db < LOUD_DB:
            return False
        ratio = power_db(mic) - ref_db
        double = ratio > self.coupling_db + MARGIN_DB
        self._peak = max(self._peak, ref_db)
        if ref_db >= self._peak - 10.0:  # the reply's loud parts: the echo is loudest there
            self._learn(min(ratio, self.coupling_db + RISE_DB) if double else ratio)
        return double

    def _learn(self, ratio: float) -> None:
        self._ratios.append(ratio)
        insort(self._sorted, ratio)
        if len(self._ratios) > WINDOW:
            del self._sorted[bisect_left(self._sorted, self._ratios.popleft())]
        self._learned += 1
        learned = self._sorted[int(0.95 * (len(self._sorted) - 1))]
        self.coupling_db = learned if self._learned >= LEARN else max(PRIOR_DB, learned)
