"""Turn-taking from VAD decisions: speech start, confirmation after a minimum length
(what barge-in and STT wait for), false starts, pauses, and the end of a turn, decided by an
`EndOfTurn` policy (voice_gateway/endpoint: the silence rule, or a model)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from voice_gateway.turns.policy import Decision, EndOfTurn, SilenceRule, Verdict
from voice_gateway.vad.base import VAD

if TYPE_CHECKING:
    import asyncio


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
        end_of_turn: EndOfTurn | None = None,
        pause_ms: int = 60,
    ) -> None:
        self.vad = vad
        self.eot = end_of_turn or SilenceRule(silence_ms)
        self.silence_ms = silence_ms  # the fallback when the policy gives no verdict
        self.pause_ms = pause_ms  # silence that starts a speculative transcript
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
        self.pauses = 0
        self._decision: Decision | None = None
        self._verdict: Verdict | None = None
        self._pause_text: str | None = None  # the speculative transcript of this pause
        self._text_expected = False  # ... is being decoded, and will be the turn's

    @property
    def speaking(self) -> bool:
        """Speech has started and the turn has not ended (pending or confirmed)."""
        return self._state != _IDLE

    @property
    def last_voiced_ms(self) -> int:
        """The end of the last voiced frame (input timeline)."""
        return self._last_voiced_end

    @property
    def options(self) -> dict[str, Any]:
        """What the call got, for session.started: the policy (`smart` without its model is
        the silence rule) and its waits."""
        return {
            "turn_detection": self.eot.name.replace("silence", "vad"),
            "turn_silence_ms": self.silence_ms,
            "turn_max_silence_ms": self.eot.max_silence_ms,
        }

    @property
    def in_confirmed_utterance(self) -> bool:
        return self._state == _ACTIVE

    def feed(self, frame: bytes, clean: bytes | None = None) -> list[TurnEvent]:
        """`clean`: the frame with the reply's echo removed, for the speech decision; the
        utterance keeps `frame` (see VoiceSession._frame for why)."""
        voiced = self.vad.is_speech(frame if clean is None else clean)
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
            self.eot.start(self._utterance)
            events: list[TurnEvent] = [SpeechStarted(start_ms)]
            return events + self._maybe_confirm()
        self._utterance.append(frame)
        self.eot.feed(frame)
        if voiced:
            self._voiced_ms += self.frame_ms
            self._silent_ms = 0
            self._last_voiced_end = self.now_ms
            self._decision = self._verdict = self._pause_text = None  # the pause is over
            self._text_expected = False
            return self._maybe_confirm() if self._state == _PENDING else []
        self._silent_ms += self.frame_ms
        if self._state == _PENDING and self._silent_ms >= self.false_gap_ms:
            return [self._reset_false_start()]
        if self._state != _ACTIVE:
            return []
        out: list[TurnEvent] = []
        first = max(self.pause_ms, self.frame_ms)
        if self._silent_ms - self.frame_ms < first <= self._silent_ms:
            self.pauses += 1
            out.append(PauseStarted(self._last_voiced_end, self.pauses))
        if self._ends():
            out.append(self._end())
        return out

    def give_text(self, pause: int, text: str) -> None:
        """The speculative transcript of pause number `pause` (ignored if speech resumed)."""
        if pause != self.pauses or not self._silent_ms or self._state != _ACTIVE:
            return
        self._pause_text = text
        if self._decision is not None:
            self._decision.give_text(text)

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
        """See `follow`: the pause's decision waits up to `VG_TURN_TEXT_WAIT_MS` for the text
        when the model says "done" first (turns/decision.py). `coming` False: it will not
        come after all."""
        if pause != self.pauses or not self._silent_ms or self._state != _ACTIVE:
            return
        self._text_expected = coming
        if self._decision is not None and self._pause_text is None:
            self._decision.expect_text(coming)

    @property
    def speculating(self) -> bool:
        """In a pause at least `pause_ms` long: no speech since the last PauseStarted."""
        return self._state == _ACTIVE and self._silent_ms >= self.pause_ms

    def _ends(self) -> bool:
        silent, eot = self._silent_ms, self.eot
        if silent < eot.min_silence_ms:
            return False
        if self._decision is None:
            self._decision = eot.decide(self._pause_text)
            if self._pause_text is not None:
                self._decision.give_text(self._pause_text)
            elif self._text_expected:
                self._decision.expect_text()
        verdict = self._decision.poll()
        if verdict is None and eot.deadline_ms and silent >= eot.deadline_ms:
            # the policy's deadline (SmartTurn: the silence rule's time), counted in frames
            verdict = self._decision.settle()
        if verdict is None:  # still thinking: its own budget (VG_TURN_BUDGET_MS) ends that
            if silent < max(self.silence_ms, eot.max_silence_ms):
                return False
            verdict = Verdict(None, "fallback", reason="timeout")
        self._verdict = verdict
        if silent >= eot.max_silence_ms:
            return True
        if verdict.complete is None:
            return silent >= self.silence_ms
        if verdict.complete or eot.unsure_ms is None or verdict.source == "text":
            return verdict.complete
        if silent < eot.unsure_ms:
            return False
        if self._text_expected and self._pause_text is None:
            # the words on their way may still hold the turn; the reply waits for them anyway
            return silent >= eot.min_silence_ms + eot.text_wait_ms and self._unsure(verdict)
        return self._unsure(verdict)

    def _unsure(self, verdict: Verdict) -> bool:
        # `auto`: only the voice said "not done", and the silence rule's time has come
        self._verdict = replace(verdict, complete=True, source="silence")
        return True

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
        event = SpeechStopped(
            self._last_voiced_end,
            audio,
            end_of_turn_ms=self._silent_ms,
            verdict=self._verdict,
            speculated=self._silent_ms >= self.pause_ms,
        )
        self._decision = self._verdict = self._pause_text = None
        self._text_expected = False
        self._state, self._utterance = _IDLE, []
        self._voiced_ms = self._silent_ms = 0
        return event
