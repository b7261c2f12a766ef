"""`auto` (AutoTurn: a "not done" of the voice alone ends at the silence rule's time): smart's
signals can end a turn sooner than `vad` would (the model's "done" on a faded voice, a finished
sentence at 340 ms), and only words that run on keep it open past the silence rule; a "not done"
from the voice alone (the model's low score, a voice that did not fade) ends at 400 ms, where
`smart` waits its maximum. The detector timeline of test_end_of_turn.py (EnergyVAD, 20 ms frames
in real time); the policy as the gateway builds it (VoiceServices.new_end_of_turn)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fault_providers import Faults, FaultSTT
from tests.unit.test_end_of_turn import Scripted
from tests.unit.test_end_of_turn_text_wait import pause_then_text
from tests.unit.test_turn import EnergyVAD
from voice_gateway.pipeline.services import VoiceServices
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.policies import SmartTurn
from voice_gateway.voice import voice_config

AUTO_SENTENCE_MS = TurnConfig().auto_sentence_ms


def detector(policy: str, model: Scripted, **settings: Any) -> TurnDetector:
    s = Settings(database_url="sqlite+aiosqlite:///:memory:", turn_max_silence_ms=1000, **settings)
    stt = FaultSTT(Faults())  # (its backlog: none, so the model is never "busy")
    services = VoiceServices(voice_config(s), stt=stt, tts=None, phrases=None)  # type: ignore[arg-type]
    services.turn_model, services._turn_model_tried = model, True
    eot = services.new_end_of_turn(TurnConfig.from_settings(s, detection=policy))
    assert isinstance(eot, SmartTurn) and eot.name == policy
    assert (eot.config.silence_ms, eot.config.min_speech_ms) == (400, 200)
    return TurnDetector(EnergyVAD(), eot.config, eot)


def test_a_doubtful_voice_ends_at_the_silence_rules_time() -> None:
    """The model scores the faded voice 0.1 and the words cannot tell: `smart` waits its 1000 ms
    maximum, `auto` ends at 400 ms like `vad`; the verdict says the silence rule ended it and
    keeps the model's score for turn.metrics. (The test's voice fades by 14 dB.)"""
    model = Scripted(0.1)
    stop = pause_then_text(detector("auto", model, turn_fade_db=-14.0), "Okay", at=12)
    assert model.calls == 1 and stop.end_of_turn_ms == 400 and stop.verdict is not None
    assert (stop.verdict.complete, stop.verdict.source) == (True, "silence")
    assert stop.verdict.probability == pytest.approx(0.1)
    stop = pause_then_text(detector("smart", Scripted(0.1), turn_fade_db=-14.0), "Okay", at=12)
    assert stop.end_of_turn_ms == 1000 and stop.verdict is not None
    assert (stop.verdict.complete, stop.verdict.source) == (False, "model")


def test_a_voice_that_did_not_fade_ends_at_the_silence_rules_time() -> None:
    """The default -21 dB fade is not reached: the model is not asked (its "done" would not
    count); `smart` waits its maximum for that, `auto` no longer than `vad`."""
    model = Scripted(0.95)
    stop = pause_then_text(detector("auto", model), "Okay", at=12)
    assert model.calls == 0 and stop.end_of_turn_ms == 400 and stop.verdict is not None
    assert stop.verdict.source == "silence"
    assert pause_then_text(detector("smart", model), "Okay", at=12).end_of_turn_ms == 1000


def test_words_that_run_on_still_hold_the_turn() -> None:
    stop = pause_then_text(detector("auto", Scripted(0.95)), "My number is five five five", at=8)
    assert stop.verdict is not None and (stop.verdict.complete, stop.verdict.source) == (
        False,
        "text",
    )
    assert stop.end_of_turn_ms == 1000


def test_a_finished_sentence_ends_the_turn_before_the_silence_rule() -> None:
    """A voice the fade rule does not pass (`VG_TURN_FADE_DB` -60: none does, as espeak-ng's)
    with a finished sentence: `auto` ends at 340 ms, `smart` (no sentence step by default)
    at its maximum."""
    model = Scripted(0.1)
    stop = pause_then_text(detector("auto", model, turn_fade_db=-60.0), "Is it raining?", at=6)
    assert stop.verdict is not None and (stop.verdict.complete, stop.verdict.source) == (
        True,
        "text",
    )
    assert AUTO_SENTENCE_MS <= stop.end_of_turn_ms <= AUTO_SENTENCE_MS + 20  # (wall clock)
    stop = pause_then_text(detector("smart", model, turn_fade_db=-60.0), "Is it raining?", at=6)
    assert stop.end_of_turn_ms == 1000


def test_the_sentence_wait_is_a_setting_for_both() -> None:
    stop = pause_then_text(
        detector("smart", Scripted(0.1), turn_fade_db=-60.0, turn_sentence_ms=300),
        "Is it raining?",
        at=6,
    )
    assert 300 <= stop.end_of_turn_ms <= 320
    stop = pause_then_text(
        detector("auto", Scripted(0.1), turn_fade_db=-60.0, turn_sentence_ms=0), "Is it?", at=6
    )
    assert stop.end_of_turn_ms == 400 and stop.verdict is not None
    assert stop.verdict.source == "silence"


def test_the_models_done_ends_it_at_the_short_silence() -> None:
    det = detector("auto", Scripted(0.95), turn_fade_db=-14.0)
    stop = pause_then_text(det, None, at=0, expect=False)
    assert stop.verdict is not None and (stop.verdict.complete, stop.verdict.source) == (
        True,
        "model",
    )
    assert stop.end_of_turn_ms <= 260


def test_words_still_on_their_way_at_the_silence_rules_time_are_waited_for() -> None:
    """A busy gateway's transcript comes at ~460 ms: `auto` waits for it (the reply needs it
    anyway) and run-on words still hold the turn; one that never comes is waited for up to
    200 + VG_TURN_TEXT_WAIT_MS (400) ms, then the silence rule ends the turn."""
    det = detector("auto", Scripted(0.1), turn_fade_db=-14.0)
    stop = pause_then_text(det, "My number is five five five", at=22)
    assert stop.end_of_turn_ms == 1000 and stop.verdict is not None
    assert stop.verdict.source == "text"
    stop = pause_then_text(detector("auto", Scripted(0.1), turn_fade_db=-14.0), None, at=0)
    assert 600 <= stop.end_of_turn_ms <= 620 and stop.verdict is not None
    # (the model, deferred for the words, is past the silence rule's time: not run)
    assert (stop.verdict.source, stop.verdict.reason) == ("fallback", "late")
