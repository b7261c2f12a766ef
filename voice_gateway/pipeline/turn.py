"""Turn-taking from VAD decisions: speech start, confirmation after a minimum length
(what barge-in and STT wait for), false starts, and the end of a turn after silence."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from voice_gateway.vad.base import VAD


@dataclass(slots=True)
class SpeechStarted:
    at_ms: int


@dataclass(slots=True)
class SpeechConfirmed:
    at_ms: int
    audio: bytes  # pre-roll + speech so far (16 kHz PCM16)


@dataclass(slots=True)
class FalseStart:
    at_ms: int
    voiced_ms: int


@dataclass(slots=True)
class SpeechStopped:
    at_ms: int  # end of the last voiced frame, on the input timeline
    audio: bytes  # the whole utterance with pre-roll


TurnEvent = SpeechStarted | SpeechConfirmed | FalseStart | SpeechStopped

_IDLE, _PENDING, _ACTIVE = 0, 1, 2


class TurnDetector:
    """Feed 16 kHz frames of `frame_ms`; get turn events. Times are input-timeline ms."""

    def __init__(
        self,
        vad: VAD,
        *,
        silence_ms: int = 400,
        min_speech_ms: int = 200,
        frame_ms: int = 20,
        preroll_ms: int = 300,
        false_start_gap_ms: int = 200,
    ) -> None:
        self.vad = vad
        self.silence_ms = silence_ms
        self.min_speech_ms = min_speech_ms
        self.frame_ms = frame_ms
        self.false_gap_ms = min(false_start_gap_ms, silence_ms)
        self.now_ms = 0
        self._state = _IDLE
        self._preroll: deque[bytes] = deque(maxlen=max(1, preroll_ms // frame_ms))
        self._utterance: list[bytes] = []
        self._voiced_ms = 0
        self._silent_ms = 0
        self._start_ms = 0
        self._last_voiced_end = 0

    @property
    def speaking(self) -> bool:
        """Speech has started and the turn has not ended (pending or confirmed)."""
        return self._state != _IDLE

    @property
    def in_confirmed_utterance(self) -> bool:
        return self._state == _ACTIVE

    def feed(self, frame: bytes) -> list[TurnEvent]:
        voiced = self.vad.is_speech(frame)
        start_ms = self.now_ms
        self.now_ms += self.frame_ms
        if self._state == _IDLE:
            if not voiced:
                self._preroll.append(frame)
                return []
            self._state = _PENDING
            self._utterance = [*self._preroll, frame]
            self._preroll.clear()
            self._start_ms, self._voiced_ms, self._silent_ms = start_ms, self.frame_ms, 0
            self._last_voiced_end = self.now_ms
            events: list[TurnEvent] = [SpeechStarted(start_ms)]
            return events + self._maybe_confirm()
        self._utterance.append(frame)
        if voiced:
            self._voiced_ms += self.frame_ms
            self._silent_ms = 0
            self._last_voiced_end = self.now_ms
            return self._maybe_confirm() if self._state == _PENDING else []
        self._silent_ms += self.frame_ms
        if self._state == _PENDING and self._silent_ms >= self.false_gap_ms:
            return [self._reset_false_start()]
        if self._state == _ACTIVE and self._silent_ms >= self.silence_ms:
            return [self._end()]
        return []

    def _maybe_confirm(self) -> list[TurnEvent]:
        if self._voiced_ms < self.min_speech_ms:
            return []
        self._state = _ACTIVE
        return [SpeechConfirmed(self.now_ms, b"".join(self._utterance))]

    def _reset_false_start(self) -> FalseStart:
        event = FalseStart(self._start_ms, self._voiced_ms)
        tail = self._utterance[-self._preroll.maxlen :] if self._preroll.maxlen else []
        self._state, self._utterance = _IDLE, []
        self._preroll.extend(tail)
        return event

    def _end(self) -> SpeechStopped:
        # keep ~100 ms of the trailing silence: whisper likes a little room after the last word
        keep = (self.silence_ms - 100) // self.frame_ms
        audio = b"".join(
            self._utterance[: len(self._utterance) - keep] if keep > 0 else self._utterance
        )
        event = SpeechStopped(self._last_voiced_end, audio)
        self._state, self._utterance = _IDLE, []
        self._voiced_ms = self._silent_ms = 0
        return event
