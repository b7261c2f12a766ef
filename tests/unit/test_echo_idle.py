"""The echo canceller between replies: with nothing played for longer than the echo window,
WebRTC AEC3 (the livekit wheel) is not run at all (its four calls a 20 ms frame were the phone
path's largest cost), the microphone is returned as it is, and what AEC3 learned of the echo
path in one reply still serves the next. Real espeak-ng speech through a speakerphone room
(tests/support/echo_room.py); a stepped clock, one 20 ms frame per step."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.echo_room import Speakerphone
from tests.support.speech import speak
from voice_gateway.echo.apm import ApmCanceller

REPLY = "Here is sentence number one of a rather long answer about tea."


class Counted:
    """The canceller's real AudioProcessingModule, its calls counted."""

    def __init__(self, apm: Any) -> None:
        self.apm, self.calls = apm, 0

    def process_stream(self, frame: Any) -> None:
        self.calls += 1
        self.apm.process_stream(frame)

    def process_reverse_stream(self, frame: Any) -> None:
        self.calls += 1
        self.apm.process_reverse_stream(frame)


def rig() -> tuple[ApmCanceller, Counted, list[float], Speakerphone]:
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0])
    counted = Counted(c.apm)
    c.apm = counted  # type: ignore[assignment]
    return c, counted, clock, Speakerphone(16000, delay_ms=90)


def play(c: ApmCanceller, room: Speakerphone, clock: list[float], reply: np.ndarray) -> float:
    """The reply sent and played, then the room quiet for 1 s; returns the dB of echo removed
    over the reply's second half (microphone energy in / out)."""
    n = len(reply) // 320
    before = c.energy()
    half = before
    for k in range(n + 50):
        if k < n:
            chunk = reply[k * 320 : k * 320 + 320]
            c.far(chunk.astype("<i2").tobytes())
            room.received(chunk)
        if k == n // 2:
            half = c.energy()
        clock[0] += 0.02
        mic = room.frame().astype("<i2").tobytes()
        out = c.near(mic)
        if k >= n + 40:  # past the echo window (0.6 s): untouched
            assert out == mic
    end = c.energy()
    return 10 * np.log10((end[0] - half[0] + 1) / (end[1] - half[1] + 1))


def test_between_replies_aec3_is_not_run_and_the_microphone_is_untouched() -> None:
    c, counted, clock, room = rig()
    rng = np.random.default_rng(5)
    for _ in range(100):  # 2 s of a caller's line before any reply
        clock[0] += 0.02
        mic = rng.normal(0, 300, 320).astype("<i2").tobytes()
        assert c.near(mic) == mic
    assert counted.calls == 0
    play(c, room, clock, speak(REPLY))
    during = counted.calls
    assert during > 4 * 100  # every frame of the reply and its echo window: 4 calls each
    for _ in range(100):
        clock[0] += 0.02
        c.near(rng.normal(0, 300, 320).astype("<i2").tobytes())
    assert counted.calls == during  # idle again


def test_what_aec3_learned_serves_the_next_reply() -> None:
    c, _counted, clock, room = rig()
    reply = speak(REPLY)
    first = play(c, room, clock, reply)
    for _ in range(150):  # 3 s of silence between the replies: AEC3 not run
        clock[0] += 0.02
        c.near(room.frame().astype("<i2").tobytes())
    second = play(c, room, clock, reply)
    assert first > 10.0, first  # the echo is removed...
    assert second > 10.0 and second > first - 3.0, (first, second)  # ...and no worse after
