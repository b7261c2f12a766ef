"""The VAD state machine: idle -> speech pending -> confirmed (after `min_speech_ms` of voiced
audio) -> pauses -> ended by its owner; pending speech that goes quiet for
`false_start_gap_ms` is a false start. It knows no end-of-turn policy: its owner
(turns/detector.py) asks one at each silent frame of a confirmed utterance and calls `end`."""

from __future__ import annotations

from collections import deque
from enum import Enum

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.events import (
    FalseStart,
    PauseStarted,
    SpeechConfirmed,
    SpeechStarted,
    TurnEvent,
)


class State(Enum):
    IDLE = 0
    PENDING = 1  # speech started, not long enough yet to count
    ACTIVE = 2  # confirmed: barge-in and STT act on it


class SpeechStates:
    """Feed each frame's VAD decision; get the speech events. Times: input-timeline ms."""

    def __init__(self, config: TurnConfig) -> None:
        self.config = config
        self.frame_ms = config.frame_ms
        self.false_gap_ms = min(config.false_start_gap_ms, config.silence_ms)
        self.now_ms = 0
        self.state = State.IDLE
        self.preroll: deque[bytes] = deque(maxlen=max(1, config.preroll_ms // config.frame_ms))
        self.utterance: list[bytes] = []
        self.voiced_ms = 0
        self.silent_ms = 0
        self.start_ms = 0
        self.last_voiced_end = 0
        self.pauses = 0  # pauses started in this call

    def feed(self, frame: bytes, voiced: bool) -> list[TurnEvent]:
        start_ms = self.now_ms
        self.now_ms += self.frame_ms
        if self.state is State.IDLE:
            if not voiced:
                self.preroll.append(frame)
                return []
            self.state = State.PENDING
            self.utterance = [*self.preroll, frame]
            self.preroll.clear()
            self.start_ms, self.voiced_ms, self.silent_ms = start_ms, self.frame_ms, 0
            self.last_voiced_end = self.now_ms
            events: list[TurnEvent] = [SpeechStarted(start_ms)]
            return events + self._maybe_confirm()
        self.utterance.append(frame)
        if voiced:
            self.voiced_ms += self.frame_ms
            self.silent_ms = 0
            self.last_voiced_end = self.now_ms
            return self._maybe_confirm() if self.state is State.PENDING else []
        self.silent_ms += self.frame_ms
        if self.state is State.PENDING and self.silent_ms >= self.false_gap_ms:
            return [self._false_start()]
        if self.state is not State.ACTIVE:
            return []
        first = max(self.config.pause_ms, self.frame_ms)
        if self.silent_ms - self.frame_ms < first <= self.silent_ms:
            self.pauses += 1
            return [PauseStarted(self.last_voiced_end, self.pauses)]
        return []

    @property
    def in_pause(self) -> bool:
        """A silent frame of a confirmed utterance was the last one fed."""
        return self.state is State.ACTIVE and self.silent_ms > 0

    def end(self) -> bytes:
        """The turn ended: the utterance's audio less its last `silence_ms` - `trailing_ms`
        (the silence rule's pause, but ~100 ms)."""
        keep = (self.config.silence_ms - self.config.trailing_ms) // self.frame_ms
        kept = self.utterance[: len(self.utterance) - keep] if keep > 0 else self.utterance
        self.state, self.utterance = State.IDLE, []
        self.voiced_ms = self.silent_ms = 0
        return b"".join(kept)

    def _maybe_confirm(self) -> list[TurnEvent]:
        if self.voiced_ms < self.config.min_speech_ms:
            return []
        self.state = State.ACTIVE
        return [SpeechConfirmed(self.now_ms, b"".join(self.utterance))]

    def _false_start(self) -> FalseStart:
        event = FalseStart(self.start_ms, self.voiced_ms)
        tail = self.utterance[-self.preroll.maxlen :] if self.preroll.maxlen else []
        self.state, self.utterance = State.IDLE, []
        self.preroll.extend(tail)
        return event
