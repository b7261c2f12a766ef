"""turns/detector.py: endpointing after silence, minimum speech length, false starts, pre-roll.

Most tests drive the detector with a VAD subclass that calls any non-zero frame speech, so the
timeline is exact; the last ones use webrtcvad on real espeak-ng speech."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.speech import frames, noise_burst, rms_dbfs, silence, speak
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import (
    FalseStart,
    PauseStarted,
    SpeechConfirmed,
    SpeechStarted,
    SpeechStopped,
    TurnEvent,
)
from voice_gateway.turns.policy import DecidingPolicy, Decision, Verdict
from voice_gateway.vad import create_vad
from voice_gateway.vad.base import VAD

SPEECH = (np.full(320, 1000, dtype="<i2")).tobytes()  # 20 ms at 16 kHz
QUIET = bytes(640)


class EnergyVAD(VAD):
    """Speech = any non-zero sample (a subclass of our VAD base, for exact timelines)."""

    name = "energy"

    def is_speech(self, frame: bytes) -> bool:
        return any(frame)


def run(det: TurnDetector, pattern: list[tuple[bytes, int]]) -> list[tuple[int, TurnEvent]]:
    """Feed (frame, count) runs; return (frame index, event) pairs."""
    out: list[tuple[int, TurnEvent]] = []
    i = 0
    for frame, count in pattern:
        for _ in range(count):
            out += [(i, ev) for ev in det.feed(frame) if not isinstance(ev, PauseStarted)]
            i += 1
    return out


def kinds(events: list[tuple[int, TurnEvent]]) -> list[str]:
    return [type(ev).__name__ for _, ev in events]


@pytest.mark.parametrize("silence_ms", [200, 400, 800])
def test_turn_ends_after_the_configured_silence(silence_ms: int) -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=silence_ms, min_speech_ms=200))
    events = run(det, [(QUIET, 10), (SPEECH, 30), (QUIET, 60)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]
    (i_start, started), (_, confirmed), (i_stop, stopped) = events
    assert isinstance(started, SpeechStarted) and started.at_ms == 200 and i_start == 10
    assert isinstance(confirmed, SpeechConfirmed) and confirmed.at_ms == 200 + 200
    assert isinstance(stopped, SpeechStopped)
    assert stopped.at_ms == 200 + 600  # the end of the last voiced frame
    # emitted on the frame where the silence reached silence_ms, not earlier or later
    assert i_stop == 10 + 30 + silence_ms // 20 - 1
    assert not det.speaking


def test_a_pause_shorter_than_the_silence_does_not_end_the_turn() -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200))
    events = run(det, [(SPEECH, 20), (QUIET, 19), (SPEECH, 20), (QUIET, 20)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]
    stopped = events[-1][1]
    assert isinstance(stopped, SpeechStopped) and stopped.at_ms == (20 + 19 + 20) * 20


@pytest.mark.parametrize("min_speech_ms", [100, 200, 400])
def test_confirmation_waits_for_the_minimum_speech(min_speech_ms: int) -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=min_speech_ms))
    events = run(det, [(SPEECH, 40), (QUIET, 30)])
    confirmed = [(i, ev) for i, ev in events if isinstance(ev, SpeechConfirmed)]
    assert len(confirmed) == 1
    i, ev = confirmed[0]
    assert i == min_speech_ms // 20 - 1 and ev.at_ms == min_speech_ms


def test_speech_shorter_than_the_minimum_is_a_false_start() -> None:
    det = TurnDetector(
        EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200, false_start_gap_ms=200)
    )
    events = run(det, [(QUIET, 5), (SPEECH, 5), (QUIET, 30)])
    assert kinds(events) == ["SpeechStarted", "FalseStart"]
    (_, started), (i_false, false) = events
    assert isinstance(false, FalseStart) and false.at_ms == started.at_ms == 100
    assert false.voiced_ms == 100
    assert i_false == 5 + 5 + 200 // 20 - 1  # given up after the false-start gap
    assert not det.speaking and not det.in_confirmed_utterance
    # the detector is ready for real speech right after
    again = run(det, [(SPEECH, 15), (QUIET, 25)])
    assert kinds(again) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]


def test_voiced_frames_separated_by_short_gaps_add_up_to_speech() -> None:
    det = TurnDetector(
        EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200, false_start_gap_ms=200)
    )
    # 5 voiced frames, a 100 ms gap (under the false-start gap), 5 more: 200 ms voiced
    events = run(det, [(SPEECH, 5), (QUIET, 5), (SPEECH, 5), (QUIET, 25)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]


def test_audio_carries_the_preroll_and_a_little_trailing_silence() -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=400, min_speech_ms=200, preroll_ms=300))
    events = run(det, [(QUIET, 50), (SPEECH, 30), (QUIET, 20)])
    confirmed = next(ev for _, ev in events if isinstance(ev, SpeechConfirmed))
    stopped = next(ev for _, ev in events if isinstance(ev, SpeechStopped))
    # 300 ms of pre-roll + 200 ms of speech when confirmed
    assert len(confirmed.audio) == (15 + 10) * 640
    assert confirmed.audio[: 15 * 640] == QUIET * 15
    # the utterance: pre-roll + 600 ms speech + 100 ms of the trailing silence
    assert len(stopped.audio) == (15 + 30 + 5) * 640
    assert stopped.audio[15 * 640 : 45 * 640] == SPEECH * 30


def test_timeline_follows_frames_of_other_sizes() -> None:
    det = TurnDetector(EnergyVAD(), TurnConfig(silence_ms=300, min_speech_ms=120, frame_ms=30))
    speech30, quiet30 = SPEECH + SPEECH[:320], bytes(960)
    events = run(det, [(quiet30, 4), (speech30, 10), (quiet30, 12)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]
    assert events[0][1].at_ms == 120 and events[2][1].at_ms == 120 + 300


# ---- webrtcvad on real speech ----------------------------------------------------------------


def last_sound_ms(pcm: np.ndarray) -> int:
    """Where the sound of a clip ends (espeak-ng adds ~360 ms of silence after speech)."""
    loud = [i for i, f in enumerate(frames(pcm, 16000)) if rms_dbfs(np.frombuffer(f, "<i2")) > -45]
    return (loud[-1] + 1) * 20


def feed_pcm(det: TurnDetector, pcm: np.ndarray) -> list[TurnEvent]:
    return [
        ev for f in frames(pcm, 16000) for ev in det.feed(f) if not isinstance(ev, PauseStarted)
    ]


def test_real_speech_is_one_turn_ending_after_the_silence() -> None:
    speech = speak("Hello, my name is Alice and I would like some green tea please.")
    det = TurnDetector(create_vad("webrtc", 3), TurnConfig(silence_ms=400, min_speech_ms=200))
    events = feed_pcm(det, np.concatenate([silence(500), speech, silence(1000)]))
    assert [type(e).__name__ for e in events] == [
        "SpeechStarted",
        "SpeechConfirmed",
        "SpeechStopped",
    ]
    speech_end_ms = 500 + last_sound_ms(speech)
    started, _, stopped = events
    assert isinstance(stopped, SpeechStopped)
    assert 400 <= started.at_ms <= 700
    # webrtcvad keeps ~120 ms of hangover
    assert speech_end_ms - 100 <= stopped.at_ms <= speech_end_ms + 200
    assert len(stopped.audio) >= len(speech) * 2 * 0.9


def test_real_noise_burst_and_silence_are_not_turns() -> None:
    det = TurnDetector(create_vad("webrtc", 3), TurnConfig(silence_ms=400, min_speech_ms=200))
    assert feed_pcm(det, silence(1000)) == []
    # faint noise may flicker the VAD (a false start at most), never a turn
    faint = feed_pcm(det, np.concatenate([noise_burst(500, dbfs=-50), silence(800)]))
    assert not any(isinstance(e, SpeechConfirmed | SpeechStopped) for e in faint)
    burst = feed_pcm(det, np.concatenate([noise_burst(100, dbfs=-10), silence(800)]))
    assert not any(isinstance(e, SpeechConfirmed | SpeechStopped) for e in burst)


class SlowModel(DecidingPolicy):
    """A model policy whose verdict comes `late_polls` frames after the pause reaches
    `min_silence_ms` (200 ms; None: never), like Smart Turn on a loaded machine; no deadline,
    its longest wait 1600 ms."""

    name = "smart"

    def __init__(self, config: TurnConfig, late_polls: int | None, verdict: Verdict) -> None:
        super().__init__(config)
        self.late_polls, self.late_verdict = late_polls, verdict

    def decide(self, text: str | None = None) -> Decision:
        owner = self

        class Late(Decision):
            polls = 0

            def poll(self) -> Verdict | None:
                self.polls += 1
                if owner.late_polls is None or self.polls <= owner.late_polls:
                    return None
                return owner.late_verdict

        return Late()


def test_a_model_still_judging_at_the_silence_rules_time_is_waited_for() -> None:
    # the verdict comes 300 ms into the pause (100 ms after the model started), past the
    # silence rule's 200 ms: "not done" keeps the turn open through the 600 ms pause (the
    # model's own budget, VG_TURN_BUDGET_MS, is what bounds the wait, not the silence rule)
    config = TurnConfig(silence_ms=200, max_silence_ms=1600, model_deadline=False)
    eot = SlowModel(config, 5, Verdict(False, "model", 0.1))
    det = TurnDetector(EnergyVAD(), config, eot)
    events = run(det, [(QUIET, 5), (SPEECH, 20), (QUIET, 30), (SPEECH, 20), (QUIET, 100)])
    assert kinds(events) == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]
    stopped = events[-1][1]
    assert isinstance(stopped, SpeechStopped) and stopped.at_ms == (5 + 20 + 30 + 20) * 20
    assert stopped.end_of_turn_ms == 1600  # "not done" waited the max
    assert stopped.verdict is not None and stopped.verdict.complete is False


def test_a_model_that_never_answers_ends_the_turn_at_the_longest_wait() -> None:
    config = TurnConfig(silence_ms=400, max_silence_ms=1600, model_deadline=False)
    eot = SlowModel(config, None, Verdict(True, "model", 0.9))
    det = TurnDetector(EnergyVAD(), config, eot)
    events = run(det, [(QUIET, 5), (SPEECH, 20), (QUIET, 100)])
    stopped = events[-1][1]
    assert isinstance(stopped, SpeechStopped) and stopped.end_of_turn_ms == 1600
    assert stopped.verdict is not None and stopped.verdict.reason == "timeout"
