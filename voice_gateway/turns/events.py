"""What turn-taking tells the call, frame by frame (times: input-timeline ms)."""

from __future__ import annotations

from dataclasses import dataclass

from voice_gateway.turns.policy import Verdict


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
class PauseStarted:
    """The caller went quiet inside a confirmed utterance (a speculative transcript starts)."""

    at_ms: int
    pause: int  # the pause's number in this call (a transcript for an older one is stale)


@dataclass(slots=True)
class SpeechStopped:
    at_ms: int  # end of the last voiced frame, on the input timeline
    audio: bytes  # the whole utterance with pre-roll
    end_of_turn_ms: int = 0  # the silence waited before the turn ended
    verdict: Verdict | None = None  # the end-of-turn policy's verdict for the last pause
    speculated: bool = False  # no speech since PauseStarted: its transcript is the turn's


TurnEvent = SpeechStarted | SpeechConfirmed | FalseStart | PauseStarted | SpeechStopped
