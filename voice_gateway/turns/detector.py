"""Turn-taking for one call: the VAD state machine (turns/states.py) and the call's end-of-turn
policy (turns/policies.py), which is asked at every silent frame of a confirmed utterance
whether the turn has ended. The pause's speculative transcript reaches the policy through
`follow` / `give_text` / `expect_text`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.events import SpeechStopped, TurnEvent
from voice_gateway.turns.policies import SilenceRule
from voice_gateway.turns.policy import EndOfTurn, Pause, Verdict
from voice_gateway.turns.states import SpeechStates, State
from voice_gateway.vad.base import VAD

if TYPE_CHECKING:
    import asyncio


class TurnDetector:
    """Feed 16 kHz frames of `config.frame_ms`; get turn events. Times are input-timeline ms.
    `end_of_turn`: the call's policy (default: the silence rule)."""

    def __init__(
        self,
        vad: VAD,
        config: TurnConfig | None = None,
        end_of_turn: EndOfTurn | None = None,
    ) -> None:
        self.vad = vad
        self.config = config or TurnConfig()
        self.policy = end_of_turn or SilenceRule(self.config)
        self.states = SpeechStates(self.config)
        self._question: str | None = None
        self.pause = Pause()  # the pause under way (reset when speech resumes or the turn ends)

    @property
    def question(self) -> str | None:
        """The agent's last question (the last sentence of the reply the caller answers), which
        changes what a complete answer is: every pause from now on carries it (`words` reads
        it)."""
        return self._question

    @question.setter
    def question(self, question: str | None) -> None:
        self._question = self.pause.question = question

    @property
    def now_ms(self) -> int:
        return self.states.now_ms

    @property
    def pauses(self) -> int:
        return self.states.pauses

    @property
    def speaking(self) -> bool:
        """Speech has started and the turn has not ended (pending or confirmed)."""
        return self.states.state is not State.IDLE

    @property
    def last_voiced_ms(self) -> int:
        """The end of the last voiced frame (input timeline)."""
        return self.states.last_voiced_end

    @property
    def in_confirmed_utterance(self) -> bool:
        return self.states.state is State.ACTIVE

    @property
    def options(self) -> dict[str, Any]:
        """What the call got, for session.started: the policy (`smart` without its model is
        the silence rule, `vad`) and its waits."""
        return {
            "turn_detection": self.policy.name,
            "turn_silence_ms": self.config.silence_ms,
            "turn_max_silence_ms": self.policy.max_silence_ms,
        }

    @property
    def speculation_pad_ms(self) -> int:
        """Silence to add to a pause's speculative transcript (decoded from `pause_ms` into
        the pause): the audio the turn has at its earliest end, the policy's first judgement
        or the silence rule, less the frame that ends it (never fed to STT; tiny.en's words
        on a phone line swing on 20 ms)."""
        cfg = self.config
        return min(self.policy.first_ms, cfg.silence_ms) - cfg.pause_ms - cfg.frame_ms

    def feed(self, frame: bytes, clean: bytes | None = None) -> list[TurnEvent]:
        """`clean`: the frame with the reply's echo removed, for the speech decision; the
        utterance keeps `frame` (see InputPath._frame in pipeline/input.py for why)."""
        voiced = self.vad.is_speech(frame if clean is None else clean)
        idle = not self.speaking
        events = self.states.feed(frame, voiced)
        if idle:
            if self.speaking:
                self.policy.start(self.states.utterance)
            return events
        self.policy.feed(frame)
        if voiced:
            if self.pause.silent_ms:
                self.pause = Pause(question=self.question)  # the pause is over
        elif self.states.in_pause:
            self.pause.silent_ms = self.states.silent_ms
            verdict = self.policy.at_pause(self.pause)
            if verdict is not None:
                events.append(self._end(verdict))
        return events

    def give_text(self, pause: int, text: str) -> None:
        """The speculative transcript of pause number `pause` (ignored if speech resumed)."""
        if not self._current(pause):
            return
        self.pause.text = text
        if self.pause.decision is not None:
            self.pause.decision.give_text(text)

    def follow(self, pause: int, spec: asyncio.Future[str], final: bool) -> None:
        """Pause number `pause`'s speculative transcript is being decoded: `give_text` when it
        arrives. `final`: it will be the turn's if the caller says nothing more, so the reply
        waits for it anyway, and a "done" may wait for its veto (`expect_text`)."""
        if final:
            self.expect_text(pause)
        spec.add_done_callback(lambda f: self._decoded(pause, f))

    def _decoded(self, pause: int, spec: asyncio.Future[str]) -> None:
        if not spec.cancelled() and spec.exception() is None:
            self.give_text(pause, spec.result())
        else:  # replaced (a barge-in check) or failed: no text is coming
            self.expect_text(pause, False)

    def expect_text(self, pause: int, coming: bool = True) -> None:
        """See `follow`: the pause's decision waits up to `text_wait_ms` for the text when the
        model says "done" first (turns/decision.py). `coming` False: it will not come after
        all."""
        if not self._current(pause):
            return
        self.pause.text_expected = coming
        if self.pause.decision is not None and self.pause.text is None:
            self.pause.decision.expect_text(coming)

    def _current(self, pause: int) -> bool:
        """Pause number `pause` is still under way."""
        st = self.states
        return pause == st.pauses and bool(st.silent_ms) and st.state is State.ACTIVE

    def _end(self, verdict: Verdict) -> SpeechStopped:
        silent_ms = self.states.silent_ms
        event = SpeechStopped(
            self.states.last_voiced_end,
            self.states.end(),
            end_of_turn_ms=silent_ms,
            verdict=verdict,
            speculated=silent_ms >= self.config.pause_ms,
        )
        self.pause = Pause(question=self.question)
        return event
