"""The `smart` rule at one pause: a graded wait over the signals the pause has.

0. The voice faded at its last sound and the speculative transcript is already decoded when
   the pause reaches `min_silence_ms` (200 ms): if it says either way, it decides and the
   model is not asked (SmartTurn.decide): a finished sentence ends the turn at once, run-on
   words wait up to the max silence. On bench/turn_taking.py's corpus this asks the model at
   62 instead of 108 of 260 pauses with the same cut-offs at every pause length, and ends two
   finished LibriVox sentences the model scores 0.07-0.10 (`--cv`). A transcript that comes
   later in the pause decides the same way (a run of the model still going is dropped),
   unless the model's "done" already ended the turn (step 2's wait): were a late one only a
   veto, the verdict would hang on how fast the decode was. With `defer_model` a transcript
   still being decoded that will be the turn's (`expect_text`) is waited for, up to
   `text_wait_ms`, before the model is asked at all: it saves the model's CPU on the turns
   whose words decide, and costs a model run's time on those whose words cannot tell.
1. The transcript says the words run on ("my number is five five five", "go forward"): wait
   up to the max silence, whatever the voice says.
2. Smart Turn says "done" (P ≥ threshold) and the voice faded at its last sound
   (turns/fade.py, `fade_db`): the turn ends at the short silence (200 ms), after
   waiting up to `text_wait_ms` for a transcript still being decoded (its veto) when that
   transcript will be the turn's (`expect_text`): the reply could not start before it anyway,
   so the wait costs the caller nothing, and without it a busy gateway, whose decodes come
   after the verdict, loses the veto (tests/unit/test_end_of_turn_text_wait.py). A voice that
   did not fade is not sent to the model at all (SmartTurn.decide): its "done" would not
   count.
   The deadline (`TurnConfig.deadline_ms`: `silence_ms`, the silence rule's): no model run is
   waited for, or started, past the silence rule's time; the pause is then the silence rule's
   (`fallback:late`), once the transcript on its way has come (waiting for it costs nothing:
   the reply waits for it too; with the voice faded its words still decide). So a busy
   gateway ends a turn no later than `vad` would, or than its transcript comes, unless a
   verdict says wait.
3. The transcript is a finished sentence ("Can you remind me to call my sister?"): the turn
   ends at the policy's sentence wait (`sentence_ms`; `auto`: `auto_sentence_ms` unless set;
   0: not used), without the model or the fade.
4. Otherwise: the max silence.

Measured in bench/turn_taking.py (`--cv`: leave-one-clip-out on real recordings, and espeak-ng
speech, which ends at full level and which the model scores low, so only step 3 ends it)."""

from __future__ import annotations

import logging
from concurrent.futures import Future

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.model import ModelSignal
from voice_gateway.turns.policy import Decision, Verdict, VerdictSource
from voice_gateway.turns.transcript import text_complete

log = logging.getLogger(__name__)


def combine(
    p: float | None, text: bool | None, threshold: float, fade: bool | None = None
) -> tuple[bool, VerdictSource]:
    """Steps 1 and 2: audio probability + text signal + the final fade -> (complete, which
    signal decided). `p` None: the model was not asked, because the voice did not fade."""
    if text is False:
        return False, "text"  # the words run on ("my number is five five five")
    if p is None:
        return False, "prosody"
    if p >= threshold:
        if fade is False:  # sounds finished to the model, but the voice stopped at full level
            return False, "prosody"
        return True, "model"
    # a full stop alone does not end the turn at once: on the LibriVox clips whisper wrote
    # most cut-off prefixes as sentences ("He might even have been made amiable.")
    return False, "model"


def sentence_done(
    text: bool | None, silence_ms: float, sentence_ms: int, frame_ms: int = 20
) -> bool:
    """Step 3: a finished sentence, and the pause has lasted `sentence_ms` (0: never). The
    pause is measured on a wall clock at each frame: half a frame counts, so the frame due at
    `sentence_ms` is not missed by a hair (it would end the turn one frame late)."""
    return bool(sentence_ms) and text is True and silence_ms + frame_ms / 2 >= sentence_ms


class SmartDecision(Decision):
    """`future` None: the model was not asked (SmartTurn.decide), only steps 1, 3 and 4 remain;
    unless `pcm` is given: the model is asked on it when the transcript that could decide alone
    (step 0) says nothing either way, does not come, or is late (`text_wait_ms`); or `dropped`
    says why it gave no verdict (busy | timeout | late): then the pause is the silence
    rule's, once a transcript on its way has come (it is free: the reply waits for it anyway,
    and with the voice faded its words still decide, step 0). `sentence_ms`: the policy's
    sentence wait (step 3)."""

    def __init__(
        self,
        config: TurnConfig,
        sentence_ms: int,
        model: ModelSignal,
        future: Future[float] | None,
        features_ms: float,
        fade: bool | None,
        pcm: bytes | None = None,
        dropped: str = "",
    ) -> None:
        self.config, self.sentence_ms, self.model = config, sentence_ms, model
        self.future, self.features_ms, self.fade = future, features_ms, fade
        self.pcm, self.dropped = pcm, dropped  # the audio the model has not been asked about
        self.started = self.asked = model.clock()
        self.text: str | None = None
        self.signal: bool | None = None  # text_complete(text), once, when it arrives
        self.expecting = False  # a transcript that will be the turn's is being decoded
        self.final: Verdict | None = None  # a fallback or 'complete' stays; 'incomplete' may
        # turn into 'complete' when the transcript arrives or the pause goes on
        self.settled = False  # the detector's deadline came (settle)

    def give_text(self, text: str) -> None:
        self.text = text
        self.signal = text_complete(text) if self.config.use_text else None

    def expect_text(self, coming: bool = True) -> None:
        self.expecting = coming

    def settle(self) -> Verdict | None:
        self.settled = True
        return self.poll()

    def poll(self) -> Verdict | None:
        if self.final is not None:
            return self.final
        cfg = self.config
        waited_ms = (self.model.clock() - self.started) * 1000
        if self.signal is not None and self.fade and cfg.text_first:
            # step 0 on a transcript that came after `min_silence_ms`: the words decide as
            # they would have then, whatever the model says (a run still going is dropped)
            self.final = Verdict(self.signal, "text", self._answered(), self.text)
            return self.final
        left_ms = cfg.left_ms(waited_ms)  # until the silence rule's time (the deadline)
        late = self.settled or left_ms <= 0
        text_due = cfg.use_text and self.expecting and self.text is None
        text_due = text_due and waited_ms < cfg.text_wait_ms
        if self.pcm is not None:
            self._ask(self.pcm, text_due, left_ms, late)
            if self.pcm is not None:
                return None  # the words are on their way
        if self.future is not None and not self.future.done():
            over = (self.model.clock() - self.asked) * 1000 >= cfg.budget_ms
            if not (over or late):
                return None
            self.future.cancel()
            self.future, self.dropped = None, "timeout" if over else "late"
        if self.dropped:
            if text_due:
                return None  # the model gave nothing; the words may (step 0)
            self.final = Verdict(None, "fallback", reason=self.dropped)
            return self.final
        p: float | None = None
        if self.future is not None:
            try:
                p = self.future.result()
            except Exception as exc:
                log.warning(
                    "end-of-turn model failed (%s); silence rule for the rest of the call", exc
                )
                self.model.broken = True
                self.final = Verdict(None, "fallback", reason="error")
                return self.final
        signal = self.signal  # (poll runs every frame of the pause)
        if p is not None and p >= cfg.threshold and self.fade is not False and text_due:
            return None  # a confident voice; give the transcript (not there yet) time to veto
        complete, source = combine(p, signal, cfg.threshold, self.fade)
        silence_ms = cfg.min_silence_ms + waited_ms
        if not complete and sentence_done(signal, silence_ms, self.sentence_ms, cfg.frame_ms):
            complete, source = True, "text"
        model_ms = None if p is None else self.features_ms + self.model.last_ms()
        verdict = Verdict(complete, source, p, self.text, model_ms=model_ms)
        if complete:
            self.final = verdict
        return verdict

    def _ask(self, pcm: bytes, text_due: bool, left_ms: float, late: bool) -> None:
        """The deferred model, once the words came and cannot tell (or none are coming): run
        it if a run can answer before the deadline and the process is not busy. While the words
        are on their way nothing is run; if they have not come by the deadline, no model
        will (they cost nothing: the reply waits for them too, and they may still decide)."""
        if text_due and not late:
            return
        self.pcm = None
        if late or left_ms < self.model.recent_ms():
            self.dropped = "late"  # the silence rule's time comes before a run could answer
            return
        self.future, self.asked = self.model.submit(pcm), self.model.clock()
        if self.future is None:
            self.dropped = "busy"

    def _answered(self) -> float | None:
        """The model's probability if it has answered; a run not done is cancelled."""
        f = self.future
        if f is None or not f.done():
            if f is not None:
                f.cancel()
            return None
        return None if f.cancelled() or f.exception() is not None else f.result()
