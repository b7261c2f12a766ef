"""VADs on real audio: webrtcvad (frame sizes, modes) and Silero (the ONNX file inside
faster-whisper, run with onnxruntime, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.real_speech import MISSING, clips, speech_span
from tests.support.speech import frames, noise_burst, silence, speak
from tests.unit.test_turn import last_sound_ms
from voice_gateway.pipeline.turn import SpeechStopped, TurnDetector
from voice_gateway.vad import create_vad

SENTENCE = "Hello, my name is Alice and I would like some green tea please."


def decisions(name: str, pcm: np.ndarray, ms: int = 20) -> list[bool]:
    vad = create_vad(name)
    return [vad.is_speech(f) for f in frames(pcm, 16000, ms)]


def test_factory_rejects_unknown_names_and_modes() -> None:
    with pytest.raises(ValueError, match="known: webrtc, silero"):
        create_vad("nope")
    with pytest.raises(ValueError, match="mode must be 0-3"):
        create_vad("webrtc", 7)


@pytest.mark.parametrize("ms", [10, 20, 30])
def test_webrtc_accepts_10_20_30_ms_frames(ms: int) -> None:
    voiced = decisions("webrtc", np.concatenate([silence(300), speak(SENTENCE)]), ms)
    assert not any(voiced[: 250 // ms]) and sum(voiced) > len(voiced) // 2


def test_webrtc_rejects_other_frame_sizes() -> None:
    with pytest.raises(ValueError, match="10/20/30 ms"):
        create_vad("webrtc").is_speech(bytes(500))


@pytest.mark.parametrize("name", ["webrtc", "silero"])
def test_speech_and_silence(name: str) -> None:
    speech = speak(SENTENCE)
    voiced = decisions(name, np.concatenate([silence(500), speech, silence(800)]))
    lead, body, tail = voiced[:24], voiced[25 : 25 + len(speech) // 320], voiced[-30:]
    assert not any(lead) and not any(tail[5:])
    assert sum(body) / len(body) > 0.7


def test_silero_ignores_loud_noise_that_webrtc_calls_speech() -> None:
    noise = noise_burst(1000, dbfs=-20)
    assert sum(decisions("webrtc", noise)) > 25  # webrtcvad flags most of it
    assert sum(decisions("silero", noise)) == 0


def test_silero_buffers_frames_into_512_sample_windows() -> None:
    from voice_gateway.vad.silero import SileroVAD

    vad = SileroVAD()
    speech = speak(SENTENCE)
    probs = [vad.probability(f) for f in frames(speech, 16000, 10)]
    assert max(probs) > 0.9 and all(0.0 <= p <= 1.0 for p in probs)
    vad.reset()
    assert vad.last_prob == 0.0
    assert vad.probability(bytes(320)) == 0.0  # 160 samples: no full window yet


def test_turn_detector_on_silero() -> None:
    det = TurnDetector(create_vad("silero"), silence_ms=400, min_speech_ms=200)
    pcm = np.concatenate([silence(300), speak(SENTENCE), silence(800)])
    events = [ev for f in frames(pcm, 16000) for ev in det.feed(f)]
    names = [type(e).__name__ for e in events if type(e).__name__ != "PauseStarted"]
    assert names == ["SpeechStarted", "SpeechConfirmed", "SpeechStopped"]
    stopped = events[-1]
    assert isinstance(stopped, SpeechStopped)
    end_ms = 300 + last_sound_ms(speak(SENTENCE))
    assert end_ms - 100 <= stopped.at_ms <= end_ms + 200


@pytest.mark.skipif(not clips(), reason=MISSING)
def test_webrtc_after_digital_silence_hears_room_tone_as_silence() -> None:
    """One detector for a whole call whose client sends digital silence between turns (the 13
    pocketsphinx recordings in turn, 300 ms of zeros before each and 1.8 s after): the end of
    each recording's speech is found as a fresh detector finds it. Without the reset after
    zeros, webrtcvad's sunken noise estimate heard the room tone after the words as speech
    for 220-780 ms (the card-game clips, "something")."""
    found = clips()
    shared = create_vad("webrtc", 3)
    for clip in [found[-1], *found]:
        pcm = np.concatenate([silence(300), clip.pcm, silence(1800)])
        fresh = create_vad("webrtc", 3)
        heard = [(shared.is_speech(f), fresh.is_speech(f)) for f in frames(pcm, 16000, 20)]
        ends = [max(i for i, v in enumerate(col) if v) for col in zip(*heard, strict=True)]
        assert ends[0] == ends[1], (clip.name, ends)
        _, last = speech_span(clip.pcm)
        assert (ends[0] - 15 - last) * 20 <= 200, (clip.name, ends)
