"""turns/fade.py, the voice's final fade, and how SmartTurn combines it with the model
and the transcript (the detector timeline of test_end_of_turn.py: EnergyVAD, 20 ms frames)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.unit.test_end_of_turn import Scripted, feed_wall, smart, stop_of
from tests.unit.test_turn import QUIET
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.decision import combine, sentence_done
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import SpeechStopped
from voice_gateway.turns.fade import TailEnergy, faded


def level(amplitude: float) -> bytes:
    """20 ms of a 200 Hz tone at `amplitude` (of full scale)."""
    t = np.arange(320) / 16000
    return (np.sin(2 * np.pi * 200 * t) * amplitude * 32767).astype("<i2").tobytes()


STEADY = level(0.3)
FADE = [level(0.3 * 10 ** (-k / 20)) for k in range(2, 40, 4)]  # 200 ms down to about -38 dB


def tail_of(frames: list[bytes]) -> float | None:
    tail = TailEnergy()
    for f in frames:
        tail.feed(f)
    return tail.drop_db()


def test_a_voice_stopping_at_full_level_has_not_faded() -> None:
    drop = tail_of([QUIET] * 5 + [STEADY] * 40 + [QUIET] * 3)
    assert drop is not None and drop > -3
    assert faded(drop, -14) is False


def test_a_voice_fading_out_has_faded() -> None:
    drop = tail_of([QUIET] * 5 + [STEADY] * 40 + FADE + [QUIET] * 3)
    assert drop is not None and drop < -14
    assert faded(drop, -14) is True


def test_too_little_sound_gives_no_measure() -> None:
    assert tail_of([STEADY] * 3) is None
    assert faded(None, -14) is None


def test_only_the_last_four_seconds_count() -> None:
    tail = TailEnergy()
    for _ in range(500):  # 10 s
        tail.feed(STEADY)
    assert len(tail.levels) == 400


@pytest.mark.parametrize(
    ("p", "text", "fade", "expected"),
    [
        (0.9, None, True, (True, "model")),
        (0.9, None, None, (True, "model")),
        (0.9, None, False, (False, "prosody")),
        (0.9, False, True, (False, "text")),
        (0.2, None, True, (False, "model")),
        (None, None, False, (False, "prosody")),  # not asked: the voice did not fade
        (None, False, False, (False, "text")),
    ],
)
def test_combine(p: float | None, text: bool | None, fade: bool | None, expected: object) -> None:
    assert combine(p, text, 0.5, fade) == expected


def test_a_confident_model_waits_when_the_voice_did_not_fade() -> None:
    det = smart(Scripted(0.9), use_text=False, fade_db=-14.0)
    _, ev = stop_of(feed_wall(det, [(STEADY, 30), (QUIET, 70)]))
    assert ev.end_of_turn_ms == 1000 and ev.verdict is not None
    assert ev.verdict.complete is False and ev.verdict.source == "prosody"


def test_a_voice_that_did_not_fade_is_not_sent_to_the_model() -> None:
    """Its "done" would be vetoed, so the model is not asked: the same wait, no inference,
    and no fallback to the silence rule when the model's pool is full (the wait does not
    depend on the load)."""
    model = Scripted(0.9)
    det = smart(model, use_text=False, fade_db=-14.0)
    _, ev = stop_of(feed_wall(det, [(STEADY, 30), (QUIET, 70)]))
    assert model.calls == 0 and ev.end_of_turn_ms == 1000 and ev.verdict is not None
    assert ev.verdict.source == "prosody" and ev.verdict.probability is None
    busy = Scripted(0.9)
    busy.in_flight = busy.workers  # every worker taken by other calls
    det = smart(busy, use_text=False, fade_db=-14.0)
    _, ev = stop_of(feed_wall(det, [(STEADY, 30), (QUIET, 70)]))
    assert ev.end_of_turn_ms == 1000 and ev.verdict is not None and ev.verdict.source == "prosody"
    # a faded voice is still scored, and the full pool still falls back (to the silence rule)
    det = smart(busy, use_text=False, fade_db=-14.0)
    pattern = [(STEADY, 30)] + [(f, 1) for f in FADE] + [(QUIET, 60)]
    _, ev = stop_of(feed_wall(det, pattern))
    assert ev.verdict is not None and ev.verdict.source == "fallback"


def speak_then_transcribe(det: TurnDetector, text: str) -> SpeechStopped:
    """600 ms at full level, then silence in real time; the pause's transcript `text` arrives
    100 ms into it."""
    out = []
    for _ in range(30):
        out += det.feed(STEADY)
    pause = det.pauses + 1
    t0 = time.monotonic()
    for i in range(70):
        out += det.feed(QUIET)
        if i == 4:
            det.give_text(pause, text)
        # paced against the start, not 20 ms after each frame: sleep's overshoot, added up
        # (~1 ms a frame on a slow VM), ran the clock 20 ms ahead of the frames by the rule's
        # 600 ms, and the turn ended at 580 ms of frames
        time.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    return next(e for e in out if isinstance(e, SpeechStopped))


def test_a_finished_sentence_ends_an_unfaded_voice_without_the_model() -> None:
    model = Scripted(0.1)
    det = smart(model, fade_db=-14.0, sentence_ms=600)
    stop = speak_then_transcribe(det, "Can you remind me to call my sister?")
    assert model.calls == 0 and stop.verdict is not None
    assert stop.verdict.complete and stop.verdict.source == "text"
    assert 600 <= stop.end_of_turn_ms < 700


def test_a_confident_model_and_a_faded_voice_end_the_turn_early() -> None:
    det = smart(Scripted(0.9), use_text=False, fade_db=-14.0)
    pattern = [(STEADY, 30)] + [(f, 1) for f in FADE] + [(QUIET, 60)]
    _, ev = stop_of(feed_wall(det, pattern))
    assert ev.verdict is not None and ev.verdict.complete and ev.verdict.source == "model"
    assert 200 <= ev.end_of_turn_ms <= 300


def test_a_transcript_that_arrived_is_not_waited_for_again() -> None:
    """The text wait is for a transcript still being decoded: one that arrived and does not
    veto ('Go forward 10 meters': neither a sentence nor a run-on) ends the turn at once."""
    det = smart(Scripted(0.9), text_wait_ms=600)
    stop = speak_then_transcribe(det, "Go forward 10 meters")
    assert stop.verdict is not None and stop.verdict.complete
    assert stop.end_of_turn_ms <= 300


# ---- the graded wait (turns/decision.py) ---------------------------------------------------

STEP = [level(0.3 * 10 ** (-17 / 20))] * 6  # 120 ms at -17 dB: a fade between -14 and -21 dB


def test_a_fade_between_the_old_and_the_new_threshold() -> None:
    drop = tail_of([QUIET] * 5 + [STEADY] * 40 + STEP + [QUIET] * 3)
    assert drop is not None and -21 < drop < -14
    for fade_db, early in ((-14.0, True), (-21.0, False)):
        det = smart(Scripted(0.9), use_text=False, fade_db=fade_db)
        _, ev = stop_of(feed_wall(det, [(STEADY, 30), (STEP[0], 6), (QUIET, 60)]))
        assert (ev.end_of_turn_ms <= 300) is early, (fade_db, ev.end_of_turn_ms)


def pause_with_text(det: TurnDetector, text: str, frames: int = 70) -> SpeechStopped:
    """1.2 s of steady voice (no fade), then silence; the transcript arrives 100 ms in."""
    out = []
    for _ in range(60):
        out += det.feed(STEADY)
    pause = det.pauses + 1
    t0 = time.monotonic()
    for i in range(frames):
        delay = t0 + i * 0.02 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        out += det.feed(QUIET)
        if i == 4:
            det.give_text(pause, text)
    return next(e for e in out if isinstance(e, SpeechStopped))


def test_a_finished_sentence_ends_the_turn_at_the_sentence_wait() -> None:
    """espeak-ng's case: the model scores it low and the voice ends at full level."""
    det = smart(Scripted(0.2), fade_db=-21.0, sentence_ms=600)
    stop = pause_with_text(det, "Can you remind me to call my sister this evening?")
    assert stop.verdict is not None and stop.verdict.complete
    assert stop.verdict.source == "text"
    assert 600 <= stop.end_of_turn_ms <= 700


@pytest.mark.parametrize(
    ("text", "sentence_ms"),
    [
        ("Can you remind me to call my sister this evening?", 0),  # not asked
        ("My number is 555", 600),  # the words run on
        ("10 of clubs", 600),  # the text cannot tell
    ],
)
def test_no_sentence_wait_without_a_finished_sentence(text: str, sentence_ms: int) -> None:
    det = smart(Scripted(0.2), fade_db=-21.0, sentence_ms=sentence_ms)
    stop = pause_with_text(det, text)
    assert stop.end_of_turn_ms == 1000
    assert stop.verdict is not None and stop.verdict.complete is False


@pytest.mark.parametrize(
    ("text", "silence", "sentence_ms", "expected"),
    [
        (True, 600, 600, True),
        (True, 580, 600, False),
        (True, 595, 600, True),  # (the frame due at 600 ms, polled a hair early)
        (True, 900, 0, False),
        (None, 900, 600, False),
        (False, 900, 600, False),
    ],
)
def test_sentence_done(text: bool | None, silence: float, sentence_ms: int, expected: bool) -> None:
    assert sentence_done(text, silence, sentence_ms) is expected


def test_the_defaults_are_the_measured_rule() -> None:
    """bench/turn_taking.py --cv chose -21 dB and 0.5 (docs/operations.md); a "done" waits up
    to 400 ms for a transcript that will be the turn's (test_end_of_turn_text_wait.py)."""
    s = Settings()
    assert (s.turn_fade_db, s.turn_threshold, s.turn_text_wait_ms) == (-21.0, 0.5, 400)
    # unset: no sentence step for smart, AUTO_SENTENCE_MS for auto (test_end_of_turn_auto.py)
    assert s.turn_sentence_ms is None and s.turn_defer_model is True


def test_the_settings_reach_each_calls_detector() -> None:
    from voice_gateway.pipeline.services import PhraseCache, VoiceServices
    from voice_gateway.turns.policies import SmartTurn
    from voice_gateway.voice import voice_config

    s = Settings(
        turn_fade_db=-18.0, turn_sentence_ms=900, turn_text_wait_ms=120, turn_defer_model=False
    )
    services = VoiceServices(voice_config(s), None, None, PhraseCache(None))  # type: ignore[arg-type]
    services._turn_model_tried = True
    services.turn_model = Scripted(0.5)
    eot = services.new_end_of_turn(TurnConfig.from_settings(s, detection="smart"))
    assert isinstance(eot, SmartTurn)
    assert (eot.config.fade_db, eot.sentence_ms, eot.config.text_wait_ms) == (-18.0, 900, 120)
    assert eot.config.defers_model is False


# ---- step 0: a faded voice and a transcript already there (turns/decision.py) -------------


def fade_then_transcribe(det: TurnDetector, text: str, at: int = 4) -> SpeechStopped:
    """600 ms at full level, a 200 ms fade to ~-38 dB, then silence in real time; the pause's
    transcript `text` arrives `at` frames into the silence (before the 200 ms decision when
    `at` < 10)."""
    out = []
    for frame in [STEADY] * 30 + FADE:
        out += det.feed(frame)
    t0 = time.monotonic()
    for i in range(70):
        out += det.feed(QUIET)
        if i == at:
            det.give_text(det.pauses, text)
        time.sleep(max(0.0, t0 + (i + 1) * 0.02 - time.monotonic()))
    return next(e for e in out if isinstance(e, SpeechStopped))


def test_a_finished_sentence_and_a_faded_voice_end_the_turn_without_the_model() -> None:
    model = Scripted(0.1)  # the model would say "not done" (the LibriVox readings it misjudges)
    det = smart(model, fade_db=-14.0)
    stop = fade_then_transcribe(det, "He might even have been made amiable himself.")
    assert model.calls == 0 and stop.verdict is not None
    assert stop.verdict.complete and stop.verdict.source == "text"
    assert 200 <= stop.end_of_turn_ms <= 240


def test_run_on_words_wait_without_asking_the_model() -> None:
    model = Scripted(0.95)
    det = smart(model, fade_db=-14.0)
    stop = fade_then_transcribe(det, "My number is five five five")
    assert model.calls == 0 and stop.verdict is not None
    assert stop.verdict.complete is False and stop.verdict.source == "text"
    assert stop.end_of_turn_ms == 1000


@pytest.mark.parametrize(
    ("text", "at", "text_first"),
    [
        ("10 of clubs", 4, True),  # the words cannot tell: the model decides
        # tiny.en's finished command in lower case, no full stop: not read as running on
        # (which would wait the max whatever the model said)
        ("go forward 10 meters", 4, True),
        ("Go somewhere and do something.", 12, True),  # decoded after the decision: too late
        ("Go somewhere and do something.", 4, False),  # step 0 switched off
    ],
)
def test_the_model_decides_when_the_transcript_cannot(text: str, at: int, text_first: bool) -> None:
    model = Scripted(0.9)
    det = smart(model, fade_db=-14.0, text_first=text_first)
    stop = fade_then_transcribe(det, text, at)
    assert model.calls == 1 and stop.verdict is not None
    assert stop.verdict.complete and stop.verdict.source == "model"
    assert stop.end_of_turn_ms <= 300


def test_step_0_needs_the_fade() -> None:
    """A voice that stopped at full level is not decided by its words at 200 ms."""
    model = Scripted(0.9)
    det = smart(model, fade_db=-14.0)
    stop = speak_then_transcribe(det, "Can you remind me to call my sister?")
    assert model.calls == 0 and stop.end_of_turn_ms == 1000
