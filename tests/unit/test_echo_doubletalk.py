"""The echo canceller's double-talk guard on real espeak-ng speech through WebRTC AEC3 (the
livekit wheel) and webrtcvad: a caller talking over a reply on a line with no echo path is
heard whole (AEC3 alone hid most of it from the VAD), while the reply's own echo on a
speakerphone is never taken for the caller. A stepped clock: one 20 ms frame per step."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.echo_room import Speakerphone
from tests.support.speech import speak
from voice_gateway.echo.apm import ApmCanceller
from voice_gateway.pipeline.overlap import removed_db
from voice_gateway.vad import create_vad

REPLY = "Here is sentence number one of a rather long answer about tea. And here is two."
CALLER = "Stop, stop, that is enough."


def reply_audio() -> np.ndarray:
    one = speak(REPLY)
    return np.concatenate([one, one])


def power_db(pcm: np.ndarray, frame: int) -> float:
    x = pcm[frame * 320 : frame * 320 + 320].astype(np.float64)
    return float(10 * np.log10(x @ x / len(x) + 1))


def test_a_caller_over_a_reply_on_a_line_with_no_echo_is_heard() -> None:
    """The phone barge-in: the reply has played 2 s into a line that carries no echo (line
    noise only) when the caller speaks; the VAD hears the caller's frames and the barge-in
    judge reads nothing of them as removed echo."""
    reply = reply_audio()
    caller = speak(CALLER)
    mic = np.random.default_rng(3).normal(0, 10, len(reply))
    mic[32000 : 32000 + len(caller)] += caller
    mic16 = np.clip(mic, -32768, 32767).astype("<i2")
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0])
    vad = create_vad("webrtc")
    talking = {100 + i for i in range(len(caller) // 320) if power_db(caller, i) > 50}
    heard: list[bool] = []
    at_start = (0.0, 0.0)
    for k in range(len(reply) // 320):
        c.far(reply[k * 320 : k * 320 + 320].astype("<i2").tobytes())
        clock[0] += 0.02
        if k == 100:
            at_start = c.energy()  # the caller begins (2 s)
        out = c.near(mic16[k * 320 : k * 320 + 320].tobytes())
        if k in talking:
            heard.append(vad.is_speech(out))
        if k == 100 + len(caller) // 320:
            assert removed_db(at_start, c.energy()) < 3.0
    assert sum(heard) >= 0.9 * len(heard), f"{sum(heard)} of {len(heard)} frames"
    assert c.double_s > 0.5


@pytest.mark.parametrize("delay_ms", [40, 90, 150])
def test_the_replys_echo_on_a_speakerphone_is_never_double_talk(delay_ms: int) -> None:
    reply = reply_audio()
    room = Speakerphone(16000, delay_ms=delay_ms)
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0])
    for k in range(len(reply) // 320):
        chunk = reply[k * 320 : k * 320 + 320]
        c.far(chunk.astype("<i2").tobytes())
        room.received(chunk)
        clock[0] += 0.02
        c.near(room.frame().astype("<i2").tobytes())
    assert c.cancelled_s > 8.0  # the whole reply was its reference
    assert c.double_s == 0.0
    assert c.double_talk is not None and -12.0 < c.double_talk.coupling_db < -6.0
