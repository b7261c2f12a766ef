"""A prosodic signal of a finished utterance: how far the voice has faded at its last sound.

Speakers lower their intensity toward the end of a turn (turn-final lowering), while a word
followed by more speech keeps its level. `TailEnergy` keeps the last 4 s as frames arrive
(the frames themselves, ~0.5 µs each) and measures the level of each 10 ms only when a pause
asks (~0.27 ms for 4 s on a Zen 3; per frame, as before, it cost 9-23 µs a frame).
`drop_db()` at a pause is the mean level of the last 110 ms up to the last sound (within 30 dB
of the loudest 10 ms) minus the 90th percentile of the sounding part: about -18 dB after the
finished recordings of bench/turn_taking.py, about -12 dB at their mid-utterance pauses
(measured there, where the pauses are spliced into running speech: see docs/operations.md
"Turn-taking" for what that does and does not show). One threshold (`fade_db`) turns it into
a vote."""

from __future__ import annotations

import numpy as np

from voice_gateway.turns.features import RecentPcm

SUB = 160  # 10 ms at 16 kHz
# the defaults of TurnConfig `fade_span_ms`, `fade_range_db` and `fade_tail_ms`
SPAN_MS = 4000  # the audio measured, up to the pause
RANGE_DB = 30.0  # "sound": within this of the loudest 10 ms
TAIL_MS = 110  # averaged at the end
_FLOOR = 1e-10


class TailEnergy:
    """Per-utterance audio (the last 4 s); `feed` PCM16 frames, `drop_db()` at a pause."""

    def __init__(self) -> None:
        self.audio = RecentPcm(SPAN_MS // 10 * SUB)

    def reset(self) -> None:
        self.audio.reset()

    def feed(self, pcm16: bytes) -> None:
        self.audio.append(pcm16)

    @property
    def levels(self) -> np.ndarray:
        return levels(self.audio.pcm())

    def drop_db(self) -> float | None:
        return drop_db(self.audio.pcm())


def levels(pcm16: bytes, span_ms: int = SPAN_MS) -> np.ndarray:
    """The level (dB) of each whole 10 ms of the audio's last `span_ms`, oldest first."""
    x = np.frombuffer(pcm16, dtype="<i2")
    n = min(span_ms // 10, len(x) // SUB)
    sub = x[len(x) - n * SUB :].reshape(n, SUB).astype(np.float64) / 32768.0
    return 10.0 * np.log10((sub**2).mean(axis=1) + _FLOOR)


def drop_db(
    pcm16: bytes, tail_ms: int = TAIL_MS, range_db: float = RANGE_DB, span_ms: int = SPAN_MS
) -> float | None:
    """The last sound's level (the mean of its last `tail_ms`) relative to the utterance (dB,
    <= 0 mostly), in the audio's last `span_ms`, sound being within `range_db` of the loudest
    10 ms; None with too little sound to tell."""
    en = levels(pcm16, span_ms)
    n = tail_ms // 10
    if len(en) < n:
        return None
    loud = np.flatnonzero(en > en.max() - range_db)
    if len(loud) < n:
        return None
    last = int(loud[-1])
    tail = float(en[max(0, last - n + 1) : last + 1].mean())
    return tail - float(np.percentile(en[loud], 90))


def faded(drop_db: float | None, fade_db: float) -> bool | None:
    """True: the voice faded out (a turn-final sound); False: it stopped at full level;
    None: no measure."""
    if drop_db is None:
        return None
    return drop_db <= fade_db
