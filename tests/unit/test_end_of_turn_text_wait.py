"""A "done" from the voice waits for the pause's transcript when that transcript is being decoded
and will be the turn's (turns/decision.py, `VG_TURN_TEXT_WAIT_MS`): on a busy gateway the
decode comes after the 200 ms decision, and without the wait the transcript's veto was lost.
The detector timeline of test_end_of_turn.py (EnergyVAD, 20 ms frames in real time)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.unit.test_end_of_turn import Scripted, smart
from tests.unit.test_end_of_turn_fade import FADE, STEADY
from tests.unit.test_turn import QUIET, EnergyVAD
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import PauseStarted, SpeechStopped


def pause_then_text(
    det: TurnDetector, text: str | None, at: int, *, expect: bool = True
) -> SpeechStopped:
    """600 ms of voice fading out, then silence in real time. When the pause starts, its
    transcript is announced (`expect_text`, as the session does for a decode that will be the
    turn's) unless `expect` is False; `text` arrives `at` frames into the silence (the model's
    decision is at frame 10), None: never."""
    out = []
    for frame in [STEADY] * 30 + FADE:
        out += det.feed(frame)
    t0 = time.monotonic()
    for i in range(70):
        events = det.feed(QUIET)
        out += events
        for ev in events:
            if isinstance(ev, PauseStarted) and expect:
                det.expect_text(ev.pause)
        if i == at and text is not None:
            det.give_text(det.pauses, text)
        if any(isinstance(e, SpeechStopped) for e in events):
            break
        time.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    return next(e for e in out if isinstance(e, SpeechStopped))


@pytest.mark.parametrize("defer", [True, False])
def test_run_on_words_decoded_after_the_decision_still_keep_the_turn_open(defer: bool) -> None:
    """`defer`: the model is not asked while the transcript may decide alone (the default); off:
    it is asked at 200 ms, and its "done" waits for the transcript's veto."""
    model = Scripted(0.95)  # the voice says "done" at the pause after "my number is five five"
    det = smart(model, fade_db=-14.0, text_wait_ms=400, defer_model=defer)
    stop = pause_then_text(det, "My number is five five five", at=16)  # decoded at 320 ms
    assert model.calls == (0 if defer else 1) and stop.verdict is not None
    assert stop.verdict.complete is False and stop.verdict.source == "text"
    assert stop.end_of_turn_ms == 1000  # waited for more, as with the transcript in time


def test_without_a_transcript_on_its_way_the_voice_decides_at_once() -> None:
    """The same late transcript, not announced (a vendor that does not speculate): the model's
    "done" ends the turn at 200 ms; the run-on words come too late to count."""
    det = smart(Scripted(0.95), fade_db=-14.0, text_wait_ms=400)
    stop = pause_then_text(det, "My number is five five five", at=16, expect=False)
    assert stop.verdict is not None and stop.verdict.complete is True
    assert 200 <= stop.end_of_turn_ms <= 260


def test_a_finished_sentence_decoded_late_ends_the_turn_when_it_arrives() -> None:
    model = Scripted(0.95)
    det = smart(model, fade_db=-14.0, text_wait_ms=400)
    stop = pause_then_text(det, "Go somewhere and do something.", at=16)
    assert stop.verdict is not None and stop.verdict.complete is True
    assert 320 <= stop.end_of_turn_ms <= 400  # when the text came, not the 200 ms decision
    assert stop.verdict.source == "text" and model.calls == 0  # the words decided alone


def test_a_finished_sentence_decoded_late_overrules_a_doubtful_voice() -> None:
    """The model asked at 200 ms (not deferred) scores the faded voice 0.1: the words decoded
    later still end the turn (were they only a veto, it would wait the full 1000 ms)."""
    model = Scripted(0.1)
    det = smart(model, fade_db=-14.0, text_wait_ms=400, defer_model=False)
    stop = pause_then_text(det, "Go somewhere and do something.", at=16)
    assert model.calls == 1 and stop.verdict is not None
    assert stop.verdict.complete is True and stop.verdict.source == "text"
    assert stop.verdict.probability == pytest.approx(0.1)  # it had answered
    assert 320 <= stop.end_of_turn_ms <= 400


def test_words_that_come_while_the_model_runs_decide_without_it() -> None:
    model = Scripted(0.95, delay_s=0.4)
    det = smart(model, fade_db=-14.0, text_wait_ms=400, defer_model=False, budget_ms=1000)
    stop = pause_then_text(det, "My number is five five five", at=14)  # 280 ms, model busy
    assert stop.verdict is not None and stop.verdict.complete is False
    assert stop.verdict.source == "text" and stop.verdict.probability is None
    assert stop.end_of_turn_ms == 1000


def test_words_that_cannot_tell_ask_the_model_when_they_arrive() -> None:
    model = Scripted(0.95)
    det = smart(model, fade_db=-14.0, text_wait_ms=400)
    stop = pause_then_text(det, "Okay", at=16)  # no full stop, a capital: says nothing
    assert model.calls == 1 and stop.verdict is not None
    assert stop.verdict.complete is True and stop.verdict.source == "model"
    assert 320 <= stop.end_of_turn_ms <= 400  # asked at 320 ms, not at 200


def test_the_model_budget_runs_from_when_it_is_asked() -> None:
    """The transcript never comes: the model is asked at 200 + 300 ms and takes 200 ms, within
    its 300 ms budget from then (from the 200 ms mark it would be 500 ms: a timeout)."""
    model = Scripted(0.95, delay_s=0.2)
    det = smart(model, fade_db=-14.0, text_wait_ms=300, budget_ms=300)
    stop = pause_then_text(det, None, at=0)
    assert model.calls == 1 and stop.verdict is not None
    assert stop.verdict.source == "model" and stop.verdict.complete is True
    assert 680 <= stop.end_of_turn_ms <= 800


def test_a_transcript_that_never_comes_is_waited_for_no_longer_than_the_setting() -> None:
    det = smart(Scripted(0.95), fade_db=-14.0, text_wait_ms=300)
    stop = pause_then_text(det, None, at=0)
    assert stop.verdict is not None and stop.verdict.complete is True
    assert stop.verdict.source == "model"
    assert 480 <= stop.end_of_turn_ms <= 560  # the 200 ms decision + the 300 ms wait


def test_a_transcript_withdrawn_during_the_wait_is_no_longer_waited_for() -> None:
    """The pause's decode cancelled (a barge-in check's decode took its place) while the voice's
    "done" waits for it: the turn ends then, not at the end of the wait."""
    det = smart(Scripted(0.95), fade_db=-14.0, text_wait_ms=1000)
    for frame in [STEADY] * 30 + FADE:
        det.feed(frame)
    t0, stop = time.monotonic(), None
    for i in range(60):
        for ev in det.feed(QUIET):
            if isinstance(ev, PauseStarted):
                det.expect_text(ev.pause)
            stop = ev if isinstance(ev, SpeechStopped) else stop
        if stop is not None:
            break
        if i == 15:
            det.expect_text(det.pauses, coming=False)
        time.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    assert stop is not None and stop.verdict is not None and stop.verdict.complete
    assert 300 <= stop.end_of_turn_ms <= 360  # at the withdrawal (frame 15), not 200 + 1000


def test_the_silence_rule_never_waits_for_text() -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200))
    stop = pause_then_text(det, None, at=0)
    assert stop.end_of_turn_ms == 400 and stop.verdict is not None
    assert stop.verdict.source == "silence"


async def test_follow_gives_the_decoded_text_and_announces_it_only_when_final() -> None:
    loop = asyncio.get_running_loop()
    for final in (True, False):
        det = smart(Scripted(0.95), fade_db=-14.0, text_wait_ms=400)
        for frame in [STEADY] * 30 + FADE + [QUIET] * 3:
            det.feed(frame)
        assert det.pauses == 1
        spec: asyncio.Future[str] = loop.create_future()
        det.follow(det.pauses, spec, final=final)
        assert det.pause.text_expected is final
        spec.set_result("My number is five five five")
        await asyncio.sleep(0)
        assert det.pause.text == "My number is five five five"
    cancelled: asyncio.Future[str] = loop.create_future()
    det = smart(Scripted(0.95), fade_db=-14.0)
    for frame in [STEADY] * 30 + FADE + [QUIET] * 3:
        det.feed(frame)
    det.follow(det.pauses, cancelled, final=True)
    assert det.pause.text_expected
    cancelled.cancel()
    await asyncio.sleep(0)
    assert det.pause.text is None  # a decode cancelled (a barge-in check's took its place)
    assert not det.pause.text_expected  # gives nothing, and is no longer waited for


def test_speech_after_the_pause_forgets_the_announced_transcript() -> None:
    det = smart(Scripted(0.95), fade_db=-14.0, text_wait_ms=400)
    for frame in [STEADY] * 30 + [QUIET] * 3:
        det.feed(frame)
    det.expect_text(det.pauses)
    assert det.pause.text_expected
    det.feed(STEADY)
    assert not det.pause.text_expected
    det.expect_text(det.pauses)  # an old pause's announcement, in speech: ignored
    assert not det.pause.text_expected


@pytest.mark.parametrize("bad", [-1, 2001])
def test_the_wait_setting_is_bounded(bad: int) -> None:
    with pytest.raises(ValueError, match="turn_text_wait_ms"):
        Settings(turn_text_wait_ms=bad)
