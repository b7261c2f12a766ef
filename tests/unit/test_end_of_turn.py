"""voice_gateway/turns: the end-of-turn policies behind TurnDetector (the silence rule,
Smart Turn with the speculative transcript), its features, its fallbacks, and the text rule.

The detector timeline is exact (EnergyVAD, as in test_turn.py); the model is the real
SmartTurnModel class with its ONNX call replaced where a test needs a given verdict, so the
pool, the budget and the fallbacks are the production ones. The last tests run the real
model on real recorded speech (skipped, saying why, without it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.support.real_speech import MISSING, clips, speech_span
from tests.unit.test_turn import QUIET, SPEECH, EnergyVAD, kinds
from voice_gateway.turns import model as model_mod
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import SpeechStopped
from voice_gateway.turns.features import N_FRAMES, RecentPcm, batch_features, window_features
from voice_gateway.turns.model import MODEL_PACKAGE, SmartTurnModel, find_model
from voice_gateway.turns.policies import SilenceRule, SmartTurn
from voice_gateway.turns.transcript import text_complete


class Scripted(SmartTurnModel):
    """The real pool and bookkeeping; `probability` answers from a script."""

    def __init__(self, p: float = 0.9, *, delay_s: float = 0.0, fail: bool = False) -> None:
        self.sessions = {}
        self.workers, self.queue_ms = 1, 0.0
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=1)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.inference_ms = []
        self.p, self.delay_s, self.fail = p, delay_s, fail
        self.calls = 0

    def probability(self, pcm16: bytes) -> float:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("onnxruntime exploded")
        return self.p


def feed_wall(det: TurnDetector, pattern: list[tuple[bytes, int]]) -> list[tuple[int, object]]:
    """Like `run`, but 20 ms frames in real time (the model's pool works meanwhile)."""
    out, i = [], 0
    t0 = time.monotonic()
    for frame, count in pattern:
        for _ in range(count):
            delay = t0 + i * 0.02 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            out += [(i, ev) for ev in det.feed(frame) if type(ev).__name__ != "PauseStarted"]
            i += 1
    return out


def smart(model: SmartTurnModel, busy: Callable[[], bool] | None = None, **kw: Any) -> TurnDetector:
    """`smart` on `model` with TurnConfig fields `kw` over these: asked at 200 ms, holding to
    1000 ms, the fade not asked, no deadline (`model_deadline=True`: the silence rule's 400 ms);
    `busy`: the process's cores are taken."""
    base = {"min_silence_ms": 200, "max_silence_ms": 1000, "fade_db": 0.0, "model_deadline": False}
    config = TurnConfig(**{**base, **kw})
    return TurnDetector(EnergyVAD(), config, SmartTurn(model, config, busy=busy))


def stop_of(events: list[tuple[int, object]]) -> tuple[int, SpeechStopped]:
    i, ev = next((i, e) for i, e in events if isinstance(e, SpeechStopped))
    assert isinstance(ev, SpeechStopped)
    return i, ev


@pytest.mark.parametrize("make", ["silence", "smart"])
def test_each_policy_gives_the_same_event_sequence(make: str) -> None:
    config = TurnConfig(use_text=False, fade_db=0.0, model_deadline=False)
    eot = SilenceRule(config) if make == "silence" else SmartTurn(Scripted(0.9), config)
    det = TurnDetector(EnergyVAD(), config, eot)
    events = feed_wall(det, [(QUIET, 5), (SPEECH, 30), (QUIET, 40)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]  # type: ignore[arg-type]


def test_complete_ends_the_turn_at_the_short_silence() -> None:
    det = smart(Scripted(0.9), use_text=False)
    _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 60)]))
    assert ev.verdict is not None and ev.verdict.complete and ev.verdict.source == "model"
    assert 200 <= ev.end_of_turn_ms <= 300 and ev.verdict.probability == pytest.approx(0.9)


def test_incomplete_waits_for_the_longer_limit() -> None:
    det = smart(Scripted(0.1), use_text=False)
    _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 70)]))
    assert ev.end_of_turn_ms == 1000 and ev.verdict is not None and ev.verdict.complete is False


def test_speech_after_an_incomplete_pause_continues_the_turn() -> None:
    det = smart(Scripted(0.1), use_text=False)
    events = feed_wall(det, [(SPEECH, 20), (QUIET, 40), (SPEECH, 20), (QUIET, 60)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]  # type: ignore[arg-type]


def test_the_transcript_vetoes_a_confident_voice() -> None:
    det = smart(Scripted(0.95), text_wait_ms=300)
    out = []
    for _ in range(30):
        out += det.feed(SPEECH)
    pause = det.pauses + 1
    for i in range(70):
        out += det.feed(QUIET)
        if i == 4:  # 100 ms into the pause: the speculative transcript arrives
            det.give_text(pause, "My number is 555")
        time.sleep(0.02)
    stop = next(e for e in out if isinstance(e, SpeechStopped))
    assert stop.end_of_turn_ms == 1000 and stop.verdict is not None
    assert stop.verdict.source == "text" and stop.verdict.complete is False


def test_a_slow_model_falls_back_to_the_silence_rule() -> None:
    det = smart(Scripted(0.9, delay_s=1.0), use_text=False, budget_ms=100)
    _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 40)]))
    assert ev.end_of_turn_ms == 400  # the silence rule's time
    assert ev.verdict is not None and ev.verdict.source == "fallback"
    assert ev.verdict.reason == "timeout"


def test_a_full_pool_falls_back_at_once_for_that_pause() -> None:
    model = Scripted(0.9)
    model.in_flight = model.workers  # every worker busy with other calls
    det = smart(model, use_text=False)
    _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 40)]))
    assert ev.verdict is not None and (ev.verdict.source, ev.verdict.reason) == ("fallback", "busy")
    assert ev.end_of_turn_ms == 400 and model.calls == 0


def test_the_wait_for_a_worker_is_rounds_of_runs_ahead_times_a_recent_median() -> None:
    model = Scripted(0.9)
    model.workers, model.inference_ms = 2, [10.0, 30.0, 90.0]  # median 30 ms
    waits = [model.expected_wait_ms(n) for n in range(6)]
    assert waits == [0.0, 0.0, 30.0, 30.0, 60.0, 60.0]
    model.inference_ms = []
    assert model.expected_wait_ms(2) == SmartTurnModel.TYPICAL_MS  # none timed yet


def test_a_pause_waits_for_a_busy_worker_within_its_queue_time() -> None:
    """The real pool: one worker held 60 ms by another call's run; a run expected to wait one
    run (~60 ms) is queued with 100 ms allowed and gets the model's verdict; with 0 ms (the
    old rule) or behind a longer queue it falls back at once."""
    model = Scripted(0.9, delay_s=0.06)
    model.inference_ms = [60.0]
    features = bytes(32000)  # 1 s of audio
    model.queue_ms = 100.0
    first = model.submit(features)
    queued = model.submit(features)
    assert first is not None and queued is not None
    assert queued.result(timeout=5) == pytest.approx(0.9) and model.calls == 2
    assert model.submit(features) is not None and model.submit(features) is not None
    assert model.submit(features) is None  # two runs ahead of it: ~120 ms > 100 ms
    model.queue_ms = 0.0
    time.sleep(0.3)
    assert model.in_flight == 0
    assert model.submit(features) is not None and model.submit(features) is None


def test_a_queued_pause_ends_on_the_models_word() -> None:
    model = Scripted(0.9)
    model.queue_ms, model.inference_ms = 150.0, [30.0]
    model.in_flight = model.workers  # another call's run holds the worker (~30 ms)
    det = smart(model, use_text=False)
    _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 40)]))
    assert ev.verdict is not None and ev.verdict.source == "model" and ev.verdict.complete
    assert ev.end_of_turn_ms < 400 and model.calls == 1


def test_a_failing_model_moves_only_that_call_to_the_silence_rule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, healthy = Scripted(fail=True), Scripted(0.9)
    det = smart(broken, use_text=False)
    with caplog.at_level(logging.WARNING):
        _, ev = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 40)]))
    assert ev.verdict is not None and ev.verdict.reason == "error" and ev.end_of_turn_ms == 400
    assert "silence rule" in caplog.text
    _, again = stop_of(feed_wall(det, [(SPEECH, 30), (QUIET, 40)]))
    assert again.verdict is not None and again.verdict.reason == "error"
    assert broken.calls == 1  # not asked again in this call
    other = smart(healthy, use_text=False)  # another call on a working model is unaffected
    _, fine = stop_of(feed_wall(other, [(SPEECH, 30), (QUIET, 40)]))
    assert fine.verdict is not None and fine.verdict.source == "model"


def test_missing_model_file_warns_once_and_uses_vad(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from voice_gateway.pipeline.services import PhraseCache, VoiceServices
    from voice_gateway.settings import Settings
    from voice_gateway.voice import voice_config

    monkeypatch.setattr(model_mod, "find_model", lambda: None)
    services = VoiceServices(voice_config(Settings()), None, None, PhraseCache(None))  # type: ignore[arg-type]
    config = TurnConfig.from_settings(Settings(), detection="smart")
    with caplog.at_level(logging.WARNING):
        first = services.new_end_of_turn(config)
        second = services.new_end_of_turn(config)
    assert isinstance(first, SilenceRule) and isinstance(second, SilenceRule)
    warnings = [r for r in caplog.records if MODEL_PACKAGE in r.getMessage()]
    assert len(warnings) == 1 and "--no-deps" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What time is it?", True),
        ("He was not an ill disposed young man.", True),
        ("My number is 555", False),
        ("my number is five five five", False),
        ("I would like to", False),
        ("He was not an old sp-", False),
        ("he might even have", None),  # lower case, no full stop: the audio decides
        ("go forward 10 meters", None),  # a finished command tiny.en writes the same way
        ("10 of clubs", None),
        ("", None),
        (" ".join(["wait"] * 12), None),  # a looped speculative decode (speech cut mid-word)
    ],
)
def test_text_signal(text: str, expected: bool | None) -> None:
    assert text_complete(text) is expected


@pytest.mark.parametrize("seconds", [0.01, 0.0125, 0.02, 0.0225, 0.0226, 1.0, 3.01, 7.99, 8.0, 9.5])
def test_window_features_are_the_batch_extractors_last_columns(seconds: float) -> None:
    """Only the columns that reach the audio are computed (and one of the front padding):
    every window is the batch extractor's last columns, whatever the audio's length, including
    the lengths where the first audio column is the first, second or third of the window."""
    rng = np.random.default_rng(3)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = (np.sin(2 * np.pi * 220 * t) * 6000 + rng.normal(0, 300, t.size) + 500).astype("<i2")
    audio = RecentPcm()
    pcm = tone.tobytes()
    for i in range(0, len(pcm), 640):
        audio.append(pcm[i : i + 640])
    assert audio.pcm() == pcm[-2 * 16000 * 8 :]  # the last 8 s, as they came
    ref = batch_features(tone.astype(np.float32) / 32768)
    for width in (400, 500, 800):
        got = window_features(audio.pcm(), width)
        assert got.shape == (80, width)
        assert np.abs(got - ref[:, N_FRAMES - width :]).max() < 1e-5


real = clips()
model_path = find_model()


@pytest.mark.skipif(not real, reason=MISSING)
@pytest.mark.skipif(
    model_path is None, reason=f"Smart Turn model missing: pip install --no-deps {MODEL_PACKAGE}"
)
def test_real_model_on_real_speech() -> None:
    """Smart Turn v3.2 on the LibriVox clips: most finished readings score as complete, and a
    cut-off card command ("eight of spades, four of clubs, seven of ...") is not decided by
    features alone (the benchmark has the curve)."""
    assert model_path is not None
    model = SmartTurnModel(model_path, workers=1)
    scores = []
    for clip in real[:5]:
        _, last = speech_span(clip.pcm)
        pcm = clip.pcm[: (last + 10) * 320].tobytes()
        start = time.perf_counter()
        scores.append(model.probability(pcm))
        assert (time.perf_counter() - start) < 1.0
    assert sum(p > 0.5 for p in scores) >= 3, scores
    model.close()
