"""CallRecording: both sides of a call in one 2-channel WAV on the caller's clock, written by
its thread to a real file: the caller as received in channel 1, sent audio in channel 2 from
the moment it was sent, what a barge-in dropped left out, the output rate resampled to the
input rate, and a write failure that costs the recording, not the call."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from voice_gateway.recording import FAR_AHEAD_S, CallRecording


def tone(hz: float, ms: int, rate: int, amp: int = 8000) -> np.ndarray:
    t = np.arange(rate * ms // 1000) / rate
    return (amp * np.sin(2 * np.pi * hz * t)).astype("<i2")


def read(path: Path) -> tuple[int, np.ndarray, np.ndarray]:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth()) == (2, 2)
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return w.getframerate(), data[0::2], data[1::2]


def feed(rec: CallRecording, pcm: np.ndarray, rate: int) -> None:
    step = rate // 50
    for i in range(0, len(pcm), step):
        rec.heard(pcm[i : i + step].tobytes())


def test_both_sides_on_the_callers_clock(tmp_path: Path) -> None:
    path = tmp_path / "agent" / "call.wav"
    rec = CallRecording(path, (16000, 16000), "call-1")
    caller = tone(440, 2000, 16000)
    reply = tone(1000, 500, 16000)
    feed(rec, caller[:16000], 16000)  # 1 s of the caller, then the reply is sent at once
    rec.played(reply.tobytes())
    feed(rec, caller[16000:], 16000)
    rec.close()
    assert not rec.failed
    rate, near, far = read(path)
    assert rate == 16000 and len(near) == 32000
    assert np.array_equal(near, caller)  # as received
    assert not far[:16000].any() and not far[24000:].any()
    assert np.array_equal(far[16000:24000], reply)  # from the moment it was sent


def test_a_barge_in_drops_what_was_not_played(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    rec = CallRecording(path, (16000, 16000), "call-2")
    reply = tone(1000, 1000, 16000)
    rec.played(reply.tobytes())  # sent ahead of the clock
    feed(rec, np.zeros(3200, dtype="<i2"), 16000)  # 200 ms played
    rec.cut()
    feed(rec, np.zeros(8000, dtype="<i2"), 16000)
    rec.close()
    _, _, far = read(path)
    assert len(far) == 11200
    assert np.array_equal(far[:3200], reply[:3200]) and not far[3200:].any()


def test_phone_rates_and_a_client_that_sends_no_audio(tmp_path: Path) -> None:
    path = tmp_path / "call.wav"
    rec = CallRecording(path, (8000, 16000), "call-3")  # output resampled to 8 kHz
    reply = tone(300, int(FAR_AHEAD_S * 1000) + 2000, 16000)
    for i in range(0, len(reply), 320):
        rec.played(reply[i : i + 320].tobytes())
    # no caller audio came: past FAR_AHEAD_S the reply was written against silence already
    assert rec.frames > 0
    rec.close()
    rate, near, far = read(path)
    assert rate == 8000 and not near.any()
    assert abs(len(far) - len(reply) // 2) <= 16  # the whole reply, at 8 kHz
    spectrum = np.abs(np.fft.rfft(far[: 8000 * 4].astype(float)))
    assert abs(np.argmax(spectrum) / 4 - 300) < 2  # still the 300 Hz tone


def test_an_unwritable_path_fails_the_recording_only(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rec = CallRecording(blocker / "call.wav", (16000, 16000), "call-4")
    feed(rec, tone(440, 3000, 16000), 16000)  # more than one block goes to the writer
    rec.played(tone(1000, 200, 16000).tobytes())
    rec.close()  # returns: the writer drained the queue
    assert rec.failed and not (blocker / "call.wav").exists()
