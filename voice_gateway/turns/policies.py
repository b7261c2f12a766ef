"""The end-of-turn policies, and what each does at a pause (every number a `TurnConfig` field;
defaults in brackets).

`vad`, `SilenceRule`: the turn ends at `silence_ms` [400] of silence, whatever was said.

`smart`, `SmartTurn`: at `min_silence_ms` [200] it weighs three signals (the rule step by
step: voice_gateway/turns/decision.py): the transcript (turns/transcript.py), the voice's fade
(turns/fade.py) and the model (turns/model.py).
- the words run on ("my number is five five five"): hold to `max_silence_ms` [1600];
- the voice faded by `fade_db` [-21 dB] and the words say either way: they decide;
- the model says done (P >= `threshold` [0.5]) on a faded voice: the turn ends then (waiting
  up to `text_wait_ms` [400] for the transcript on its way, whose words may veto);
- a finished sentence: ends at `sentence_ms` [unset: 0, never];
- no verdict (model busy, slow, late for `silence_ms`, or failed): the silence rule;
- anything else (the model's "not done", an unfaded voice): hold to `max_silence_ms`.

`auto`, `AutoTurn`: smart's signals within the silence rule's time. The model says done on a
faded voice: `min_silence_ms` [200]; a finished sentence: `auto_sentence_ms` [340] (or
`sentence_ms` when set); words that run on: hold to `max_silence_ms` [1600]; anything else
(a "not done" only the voice gave): the silence rule, `silence_ms` [400] (once the words on
their way have come, or `min_silence_ms` + `text_wait_ms` passed).

`words`, `WordsTurn`: `auto` with the words read by the text classifier (turns/words.py,
turns/text_eou.py), given the agent's last question when the call knows it (`Pause.question`).
Its P(complete) under `words_hold_below` [0.2] holds the turn to `max_silence_ms`, whatever the
voice says; from `words_done_from` [0.8] with the voice faded (or the model's "done") the turn
ends at once; anything else (doubt) is `auto`'s: the silence rule's `silence_ms` unless its
signals agree sooner, run-on words still held. No transcript, or one the classifier cannot tell
(empty, garbage, not English): exactly `auto`.

A new model is one module with a `DecidingPolicy` subclass (voice_gateway/turns/policy.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.decision import SmartDecision
from voice_gateway.turns.fade import drop_db, faded
from voice_gateway.turns.features import RecentPcm
from voice_gateway.turns.model import ModelSignal, SmartTurnModel
from voice_gateway.turns.policy import (
    DecidingPolicy,
    Decision,
    EndOfTurn,
    Pause,
    Ready,
    Verdict,
)
from voice_gateway.turns.transcript import text_complete
from voice_gateway.turns.words import WordsSignal

log = logging.getLogger(__name__)


class SilenceRule(EndOfTurn):
    """`vad`: `silence_ms` of silence ends the turn."""

    name = "vad"

    def at_pause(self, pause: Pause) -> Verdict | None:
        return Verdict(True, "silence") if pause.silent_ms >= self.config.silence_ms else None


class SmartTurn(DecidingPolicy):
    """`smart`: the model, the transcript and the fade (decision.py) decide a pause; at each
    frame after that `DecidingPolicy.ends`: "done" ends the turn, "not done" holds it to
    `max_silence_ms`, no verdict is the silence rule's. Keeps the utterance's last 8 s for the
    model as they arrive."""

    name = "smart"

    def __init__(
        self,
        model: SmartTurnModel,
        config: TurnConfig,
        *,
        busy: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(config)
        self.model = ModelSignal(model, busy, clock)
        self.audio = RecentPcm()  # the utterance's last 8 s, as it arrives

    @property
    def sentence_ms(self) -> int:
        """A finished sentence ends the turn after this silence (0: never)."""
        return self.config.sentence_ms or 0

    def start(self, preroll: list[bytes]) -> None:
        self.audio.reset()
        for frame in preroll:
            self.feed(frame)

    def feed(self, frame: bytes) -> None:
        self.audio.append(frame)

    def decide(self, text: str | None = None) -> Decision:
        cfg, model = self.config, self.model
        if model.broken:
            return Ready(Verdict(None, "fallback", reason="error"))
        started = time.perf_counter()
        try:
            pcm = self.audio.pcm()
            fade = None
            if cfg.fade is not None:
                drop = drop_db(pcm, cfg.fade_tail_ms, cfg.fade_range_db, cfg.fade_span_ms)
                fade = faded(drop, cfg.fade)
            if fade is False:
                # the voice stopped at full level: the model's "done" would be vetoed
                # (decision.py step 2), so it is not asked. bench/turn_taking.py's corpus: 60 %
                # of pauses, 95 % of those inside a sentence, and every espeak-ng sentence
                return self._decision(None, 0.0, fade)
            signal = text_complete(text) if text is not None and cfg.use_text else None
            if fade and cfg.text_first and signal is not None:
                # a faded voice and a transcript already decoded that says either way: the
                # words decide, the model is not asked (decision.py step 0)
                return Ready(Verdict(signal, "text", None, text))
            if fade and cfg.defers_model and text is None:
                # the transcript may still come and decide alone: the model is asked only if
                # it does not (decision.py step 0), so a busy gateway whose decodes come late
                # does not pay for both
                return self._decision(None, (time.perf_counter() - started) * 1000, fade, pcm)
            future = model.submit(pcm)  # the features are computed on the pool
        except Exception as exc:
            log.warning("end-of-turn features failed: %s", exc)
            model.broken = True
            return Ready(Verdict(None, "fallback", reason="error"))
        features_ms = (time.perf_counter() - started) * 1000
        if future is None:  # the words on their way may still decide (decision.py)
            return self._decision(None, features_ms, fade, dropped="busy")
        return SmartDecision(cfg, self.sentence_ms, model, future, features_ms, fade)

    def _decision(
        self,
        future: None,
        features_ms: float,
        fade: bool | None,
        pcm: bytes | None = None,
        dropped: str = "",
    ) -> SmartDecision:
        return SmartDecision(
            self.config, self.sentence_ms, self.model, future, features_ms, fade, pcm, dropped
        )


class AutoTurn(SmartTurn):
    """`auto`: smart's signals, but only words that run on hold a turn past `silence_ms`."""

    name = "auto"

    @property
    def sentence_ms(self) -> int:
        cfg = self.config
        return cfg.auto_sentence_ms if cfg.sentence_ms is None else cfg.sentence_ms

    def ends(self, pause: Pause, verdict: Verdict) -> Verdict | None:
        if verdict.complete is not False or verdict.source == "text":
            return super().ends(pause, verdict)  # done, run-on words, or no verdict: as smart
        if pause.silent_ms >= self.max_silence_ms:
            return verdict
        # only the voice said "not done": the silence rule's time, once the words on their way
        # have come (the reply waits for them anyway), or stopped being waited for
        cfg = self.config
        if pause.silent_ms < cfg.silence_ms:
            return None
        if pause.text_due and pause.silent_ms < cfg.min_silence_ms + cfg.text_wait_ms:
            return None
        return replace(verdict, complete=True, source="silence")


class WordsTurn(AutoTurn):
    """`words`: `auto`, with the words' P(complete) (turns/words.py) deciding when it can."""

    name = "words"

    def __init__(
        self,
        model: SmartTurnModel,
        config: TurnConfig,
        *,
        busy: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(model, config, busy=busy, clock=clock)
        self.words = WordsSignal(config)

    def ends(self, pause: Pause, verdict: Verdict) -> Verdict | None:
        reading = None if pause.text is None else self.words.read(pause.text, pause.question)
        words = None if reading is None else reading.complete
        if words is False:  # unfinished words: the longest wait
            return verdict if pause.silent_ms >= self.max_silence_ms else None
        decision = pause.decision
        faded = isinstance(decision, SmartDecision) and decision.fade is True
        if words and (faded or (verdict.complete and verdict.source == "model")):
            return replace(verdict, complete=True, source="text")  # a finished utterance
        return super().ends(pause, verdict)  # doubt, or no words it can read: `auto`'s


POLICIES: dict[str, type[SmartTurn]] = {"smart": SmartTurn, "auto": AutoTurn, "words": WordsTurn}


def policy_for(
    config: TurnConfig,
    model: SmartTurnModel | None,
    busy: Callable[[], bool] | None = None,
) -> EndOfTurn:
    """The call's policy (`config.detection`); `smart`, `auto` or `words` without the model:
    `vad`."""
    if config.detection == "vad" or model is None:
        return SilenceRule(config)
    return POLICIES[config.detection](model, config, busy=busy)
