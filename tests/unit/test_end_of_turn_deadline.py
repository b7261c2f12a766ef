"""`smart` never keeps a caller waiting for its model past the silence rule's time (TurnConfig
`deadline_ms`: `silence_ms`, the gateway's `VG_ENDPOINT_SILENCE_MS`): on a busy gateway a model
run still going at 400 ms, or one that could not answer by then, gives way to the silence rule
(`fallback:late`), as `vad` would end the pause; before, the turn waited for the model's budget
or, with the model deferred, until 200 + 400 ms to ask it. The transcript the reply waits for
anyway is still waited for (its words decide, step 0), and a verdict that says "wait" (run-on
words, a doubtful voice) still keeps the turn open. The detector timeline of test_end_of_turn.py
(EnergyVAD, 20 ms frames in real time)."""

from __future__ import annotations

from tests.unit.test_end_of_turn import Scripted, smart
from tests.unit.test_end_of_turn_text_wait import pause_then_text
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.policies import SmartTurn


def test_a_model_run_late_for_the_deadline_falls_back_at_the_silence_rules_time() -> None:
    """Asked at 200 ms (no transcript on its way), the run takes 500 ms: without the deadline
    the turn waits for the 300 ms budget (500 ms); with it, it ends at 400 ms like `vad`."""
    slow = Scripted(0.95, delay_s=0.5)
    stop = pause_then_text(
        smart(slow, fade_db=-14.0, model_deadline=True), None, at=0, expect=False
    )
    assert stop.verdict is not None and stop.verdict.complete is None
    assert (stop.verdict.source, stop.verdict.reason) == ("fallback", "late")
    assert stop.end_of_turn_ms == 400
    det = smart(Scripted(0.95, delay_s=0.5), fade_db=-14.0)
    before = pause_then_text(det, None, 0, expect=False)
    assert before.verdict is not None and before.verdict.reason == "timeout"
    assert before.end_of_turn_ms >= 480


def test_words_that_come_after_the_deadline_and_cannot_tell_ask_no_model() -> None:
    """Deferred, the words come at ~500 ms and say nothing either way: the model is not run
    (it could only answer after the silence rule's time) and the turn ends when they come,
    which is when the reply could start; before, the model was asked then and the turn ended
    after its run."""
    model = Scripted(0.95, delay_s=0.1)
    stop = pause_then_text(smart(model, fade_db=-14.0, model_deadline=True), "Okay", at=25)
    assert model.calls == 0 and stop.verdict is not None
    assert (stop.verdict.source, stop.verdict.reason) == ("fallback", "late")
    assert 480 <= stop.end_of_turn_ms <= 540
    model = Scripted(0.95, delay_s=0.1)
    before = pause_then_text(smart(model, fade_db=-14.0), "Okay", at=25)
    assert model.calls == 1 and before.end_of_turn_ms >= 580


def test_words_that_come_after_the_deadline_still_decide() -> None:
    """The transcript is waited for past 400 ms (the reply waits for it anyway): run-on words
    keep the turn open, a finished sentence ends it when it comes."""
    model = Scripted(0.95)
    det = smart(model, fade_db=-14.0, model_deadline=True)
    stop = pause_then_text(det, "My number is five five five", at=24)
    assert model.calls == 0 and stop.verdict is not None and stop.verdict.source == "text"
    assert stop.verdict.complete is False and stop.end_of_turn_ms == 1000
    stop = pause_then_text(det, "Go somewhere and do something.", at=24)
    assert stop.verdict is not None and stop.verdict.complete is True
    assert stop.verdict.source == "text" and 480 <= stop.end_of_turn_ms <= 540


def test_no_model_run_is_started_that_could_not_answer_in_time() -> None:
    """Recent runs took 250 ms and 200 ms are left at the decision: the run is not started (it
    would only take CPU from the other calls) and the silence rule ends the pause."""
    model = Scripted(0.95)
    model.inference_ms = [250.0]
    stop = pause_then_text(smart(model, fade_db=-14.0, model_deadline=True), None, 0, expect=False)
    assert model.calls == 0 and stop.verdict is not None
    assert (stop.verdict.source, stop.verdict.reason) == ("fallback", "late")
    assert stop.end_of_turn_ms == 400


def test_a_doubtful_voice_still_keeps_the_turn_open_past_the_deadline() -> None:
    model = Scripted(0.1)
    stop = pause_then_text(smart(model, fade_db=-14.0, model_deadline=True), "Okay", at=12)
    assert model.calls == 1 and stop.verdict is not None
    assert stop.verdict.complete is False and stop.verdict.source == "model"
    assert stop.end_of_turn_ms == 1000  # the max silence: a reason to wait


def test_run_on_words_while_a_late_run_is_pending_still_keep_the_turn_open() -> None:
    """The model's run is late (at 400 ms it would give way to the silence rule) but the run-on
    words arrive at ~340 ms, before it: they decide and the turn waits for more."""
    model = Scripted(0.95, delay_s=0.5)
    det = smart(model, fade_db=-14.0, model_deadline=True, defer_model=False)
    stop = pause_then_text(det, "My number is five five five", at=17)
    assert stop.verdict is not None and stop.verdict.complete is False
    assert stop.verdict.source == "text" and stop.end_of_turn_ms == 1000


def test_a_deadline_not_after_the_decision_is_not_applied() -> None:
    config = TurnConfig(min_silence_ms=400, silence_ms=400, model_deadline=True)
    assert config.deadline_ms is None and config.left_ms(1000.0) == float("inf")
    assert TurnConfig(silence_ms=400, model_deadline=True).left_ms(50.0) == 150.0
    assert TurnConfig(model_deadline=False).deadline_ms is None


def test_the_gateway_gives_each_call_the_silence_rules_time_as_its_deadline() -> None:
    from voice_gateway.pipeline.services import PhraseCache, VoiceServices
    from voice_gateway.voice import voice_config

    s = Settings(endpoint_silence_ms=700)
    services = VoiceServices(voice_config(s), None, None, PhraseCache(None))  # type: ignore[arg-type]
    services._turn_model_tried = True
    services.turn_model = Scripted(0.5)
    eot = services.new_end_of_turn(TurnConfig.from_settings(s, detection="smart"))
    assert isinstance(eot, SmartTurn) and eot.config.deadline_ms == 700
    assert eot.model.busy is not None
    services.stt = type("Loaded", (), {"backlog": lambda self: 1})()  # type: ignore[assignment]
    assert eot.model.busy() is True


def test_a_call_s_own_waits_reach_its_policy() -> None:
    """session.start's turn_silence_ms / turn_max_silence_ms (turns/options.py) over the
    gateway's: the silence rule's time (and so smart's deadline) and smart's longest wait."""
    from voice_gateway.pipeline.services import PhraseCache, VoiceServices
    from voice_gateway.turns.policies import SilenceRule
    from voice_gateway.voice import voice_config

    s = Settings(endpoint_silence_ms=700, turn_max_silence_ms=1800)
    services = VoiceServices(voice_config(s), None, None, PhraseCache(None))  # type: ignore[arg-type]
    services._turn_model_tried = True
    services.turn_model = Scripted(0.5)
    asked = {"turn_detection": "smart", "turn_silence_ms": 300, "turn_max_silence_ms": 900}
    eot = services.new_end_of_turn(voice_config(s).turn_options("voice", asked)[0].config)
    assert isinstance(eot, SmartTurn) and (eot.config.deadline_ms, eot.max_silence_ms) == (300, 900)
    # never under the pause the model judges
    longer = Settings(endpoint_silence_ms=700, turn_max_silence_ms=200, turn_min_silence_ms=300)
    eot = services.new_end_of_turn(
        voice_config(longer).turn_options("voice", {"turn_detection": "smart"})[0].config
    )
    assert isinstance(eot, SmartTurn) and (eot.config.deadline_ms, eot.max_silence_ms) == (700, 300)
    asked = {"turn_detection": "vad", "turn_silence_ms": 250, "turn_max_silence_ms": 900}
    rule = services.new_end_of_turn(voice_config(s).turn_options("voice", asked)[0].config)
    assert isinstance(rule, SilenceRule) and rule.first_ms == rule.max_silence_ms == 250


def test_a_busy_process_does_not_run_the_model() -> None:
    """`busy` (the gateway: a whisper decode waits for a worker): the model's CPU would slow the
    transcripts every call waits for, so the pause is the silence rule's (`fallback:busy`)."""
    model, load = Scripted(0.95), [True]
    det = smart(model, fade_db=-14.0, model_deadline=True, busy=lambda: load[0])
    stop = pause_then_text(det, None, at=0, expect=False)
    assert model.calls == 0 and stop.verdict is not None
    assert (stop.verdict.source, stop.verdict.reason) == ("fallback", "busy")
    assert stop.end_of_turn_ms == 400
    load[0] = False  # the next pause, with the cores free again, asks the model
    stop = pause_then_text(det, None, at=0, expect=False)
    assert model.calls == 1 and stop.verdict is not None and stop.verdict.source == "model"
    assert 200 <= stop.end_of_turn_ms <= 260


def test_a_busy_process_still_waits_for_the_words_on_their_way() -> None:
    """Busy when the words are late: no model, but run-on words that come at ~460 ms still keep
    the turn open (they cost nothing; the silence rule alone would have cut the caller off)."""
    model = Scripted(0.95)
    det = smart(model, fade_db=-14.0, model_deadline=True, defer_model=False, busy=lambda: True)
    stop = pause_then_text(det, "My number is five five five", at=23)
    assert model.calls == 0 and stop.verdict is not None
    assert stop.verdict.source == "text" and stop.verdict.complete is False
    assert stop.end_of_turn_ms == 1000
