"""End of turn: during a pause, has the caller finished? One object per call, fed every 16 kHz
frame of the utterance; asked once per pause (`decide`), polled once per frame after that.

`feed` runs on the event loop for every 20 ms frame, so it must be cheap (microseconds); a
model runs in `decide`'s work, off the loop. A decision never raises: a failure, a time-out
or a saturated pool is a `Verdict` with `complete=None` and the detector falls back to the
silence rule for that pause."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

VerdictSource = Literal["silence", "model", "text", "prosody", "fallback"]


@dataclass(slots=True)
class Verdict:
    complete: bool | None  # None: no verdict, the silence rule decides this pause
    source: VerdictSource
    probability: float | None = None  # the audio model's, when it ran
    text: str | None = None  # the speculative transcript it saw, if any
    reason: str = ""  # for a fallback: busy | error | timeout | late
    model_ms: float | None = None  # features + inference

    def as_dict(self) -> dict[str, object]:
        return {
            "complete": self.complete,
            "source": self.source,
            "probability": None if self.probability is None else round(self.probability, 3),
            "reason": self.reason or None,
            "model_ms": None if self.model_ms is None else round(self.model_ms, 1),
        }


class Decision(ABC):
    """One pause's pending decision."""

    @abstractmethod
    def poll(self) -> Verdict | None:
        """The verdict so far; None while the model is still working."""

    def give_text(self, text: str) -> None:
        """The speculative transcript of the utterance up to this pause arrived."""
        return None

    def settle(self) -> Verdict | None:
        """The pause reached the policy's `deadline_ms` with `poll` still None: the verdict
        there is now (a wait given up: a fallback), or None: still waiting for something that
        costs the caller nothing (SmartDecision: the transcript the reply waits for anyway)."""
        return Verdict(None, "fallback", reason="late")

    def expect_text(self, coming: bool = True) -> None:
        """A speculative transcript of this pause is being decoded, and it will be the turn's
        own if the caller says nothing more: the reply waits for it in any case. `coming`
        False: it will not come after all (cancelled or failed)."""
        return None


class Ready(Decision):
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    def poll(self) -> Verdict:
        return self.verdict


class EndOfTurn(ABC):
    """A turn-end policy. `min_silence_ms`: the pause after which `decide` is called;
    `max_silence_ms`: how long an 'incomplete' verdict keeps the turn open; `unsure_ms`: how
    long one keeps it open when only the voice says so (the model, an unfaded voice), not the
    words (source "text"): None, as long as any other (`auto`: the silence rule's time, so
    only words that run on hold a turn past it); `deadline_ms`: the pause at which a decision
    still thinking is asked to `settle` (None: never; it is waited for up to
    `max_silence_ms`)."""

    name = "silence"
    min_silence_ms = 400
    max_silence_ms = 400
    unsure_ms: float | None = None  # an 'incomplete' the words did not give ends here
    text_wait_ms: float = 0.0  # ... once a transcript on its way came, or this after min
    deadline_ms: float | None = None  # a pause still undecided at this much silence settles

    def start(self, preroll: list[bytes]) -> None:
        """A new utterance begins with these frames (the pre-roll and the first voiced one)."""
        return None

    def feed(self, frame: bytes) -> None:
        """The next frame of the utterance (pauses included)."""
        return None

    @abstractmethod
    def decide(self, text: str | None = None) -> Decision:
        """Called once per pause when it reaches `min_silence_ms`; must not block. `text`: the
        pause's speculative transcript when it is already decoded (else `give_text` later)."""

    def close(self) -> None:
        return None


class SilenceRule(EndOfTurn):
    """The turn ends after `silence_ms` of VAD silence, whatever was said."""

    def __init__(self, silence_ms: int = 400) -> None:
        self.min_silence_ms = self.max_silence_ms = silence_ms

    def decide(self, text: str | None = None) -> Decision:
        return Ready(Verdict(True, "silence"))
