"""The end-of-turn interface: one policy object per call, one method per event.

`start` / `feed` see the utterance's audio (every 20 ms frame: it must be cheap, microseconds;
a model runs on its pool, off the event loop), and `at_pause` is asked on every silent frame
of a confirmed utterance: the `Verdict` that ends the turn now, or None to keep listening. The
policies themselves are in voice_gateway/turns/policies.py.

A policy that judges once per pause and may take time doing it (a model) is a
`DecidingPolicy`: at `min_silence_ms` it makes a `Decision`, polled every frame after that.
A decision never raises: a failure, a time-out or a saturated pool is a `Verdict` with
`complete=None`, and the pause is then the silence rule's."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

from voice_gateway.turns.config import TurnConfig

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
        """The pause reached the policy's deadline with `poll` still None: the verdict there
        is now (a wait given up: a fallback), or None: still waiting for something that costs
        the caller nothing (SmartDecision: the transcript the reply waits for anyway)."""
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


@dataclass(slots=True)
class Pause:
    """The pause under way in a confirmed utterance, as a policy sees it at each frame."""

    silent_ms: int = 0
    text: str | None = None  # its speculative transcript, once decoded
    text_expected: bool = False  # ... is being decoded, and will be the turn's
    question: str | None = None  # the agent's last question, which the words answer (if known)
    decision: Decision | None = None  # a DecidingPolicy's, from `min_silence_ms` on

    @property
    def text_due(self) -> bool:
        """A transcript that will be the turn's is on its way."""
        return self.text_expected and self.text is None


class EndOfTurn(ABC):
    """A call's end-of-turn policy. `name`: the `turn_detection` it answers to;
    `max_silence_ms`: the longest silence it lets a turn run."""

    name = "vad"

    def __init__(self, config: TurnConfig) -> None:
        self.config = config

    @property
    def max_silence_ms(self) -> int:
        return self.config.silence_ms

    @property
    def first_ms(self) -> int:
        """The silence at which the policy first judges a pause."""
        return self.config.silence_ms

    def start(self, preroll: list[bytes]) -> None:
        """A new utterance begins with these frames (the pre-roll and the first voiced one)."""
        return None

    def feed(self, frame: bytes) -> None:
        """The next frame of the utterance (pauses included)."""
        return None

    @abstractmethod
    def at_pause(self, pause: Pause) -> Verdict | None:
        """Every silent frame of a confirmed utterance: the verdict that ends the turn now, or
        None: not yet."""

    def close(self) -> None:
        return None


class DecidingPolicy(EndOfTurn):
    """Judges a pause once, at `min_silence_ms`, with a `Decision` that may take time;
    `verdict` is what it has said so far, with the waits every such policy keeps: a decision
    still thinking at the deadline (`deadline_ms`) is asked to settle, and one still thinking
    at the longest wait (or the silence rule's time, if later) gives way (`timeout`). `ends`
    turns that verdict into the turn's end: "done" ends it, "not done" holds it to the longest
    wait, and no verdict (a fallback) leaves the pause to the silence rule."""

    def at_pause(self, pause: Pause) -> Verdict | None:
        verdict = self.verdict(pause)
        return None if verdict is None else self.ends(pause, verdict)

    def ends(self, pause: Pause, verdict: Verdict) -> Verdict | None:
        """The pause's verdict so far -> the turn's end now, or None."""
        if pause.silent_ms >= self.max_silence_ms:
            return verdict  # the longest wait
        if verdict.complete is None:  # no verdict: the silence rule
            return verdict if pause.silent_ms >= self.config.silence_ms else None
        return verdict if verdict.complete else None  # "not done" holds to the longest wait

    @property
    def max_silence_ms(self) -> int:
        return self.config.longest_ms

    @property
    def first_ms(self) -> int:
        return self.config.min_silence_ms

    @abstractmethod
    def decide(self, text: str | None = None) -> Decision:
        """Called once per pause when it reaches `min_silence_ms`; must not block. `text`: the
        pause's speculative transcript when it is already decoded (else `give_text` later)."""

    def verdict(self, pause: Pause) -> Verdict | None:
        """The pause's verdict so far; None before `min_silence_ms` and while deciding."""
        cfg, silent = self.config, pause.silent_ms
        if silent < cfg.min_silence_ms:
            return None
        if pause.decision is None:
            pause.decision = self.decide(pause.text)
            if pause.text is not None:
                pause.decision.give_text(pause.text)
            elif pause.text_expected:
                pause.decision.expect_text()
        verdict = pause.decision.poll()
        if verdict is None and cfg.deadline_ms and silent >= cfg.deadline_ms:
            verdict = pause.decision.settle()  # counted in frames
        if verdict is None and silent >= max(cfg.silence_ms, self.max_silence_ms):
            verdict = Verdict(None, "fallback", reason="timeout")
        return verdict
