"""VADs on real audio: webrtcvad (frame sizes, modes) and Silero (the ONNX file inside
faster-whisper, run with onnxruntime, no torch)."""

from __future__ import annotations

import numpy as np
import pytest
import webrtcvad

from tests.support.real_speech import MISSING, clips, speech_span
from tests.support.speech import frames, noise_burst, silence, speak
from tests.unit.test_turn import last_sound_ms
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import SpeechStopped
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
    det = TurnDetector(create_vad("silero"), TurnConfig(silence_ms=400, min_speech_ms=200))
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


SENTENCES = (
    SENTENCE,
    "What time does the library open tomorrow morning?",
    "Please tell me a little bit about the weather today.",
)


@pytest.mark.parametrize("text", SENTENCES)
def test_webrtc_never_calls_digital_silence_speech(text: str) -> None:
    """webrtcvad's hangover calls the first 80-120 ms of all-zero frames after espeak-ng's
    speech voiced; the gateway's VAD ends the speech at its last sound instead."""
    speech = speak(text)
    pcm = np.concatenate([silence(300), speech, silence(800)])
    voiced = decisions("webrtc", pcm)
    last_sound = (300 + last_sound_ms(speech)) // 20  # the frame after the last with sound
    assert max(i for i, v in enumerate(voiced) if v) + 1 <= last_sound + 1
    raw = webrtcvad.Vad(3)
    hangover = [raw.is_speech(f, 16000) for f in frames(pcm, 16000)]
    assert max(i for i, v in enumerate(hangover) if v) + 1 >= last_sound + 3  # what it fixes


def test_webrtc_quiet_sound_is_still_judged() -> None:
    """Only exact zeros are silence by rule: a frame of ±1 (dither) and a quiet voice go to
    webrtcvad as before, and speech resumes after zeros at once."""
    vad = create_vad("webrtc")
    speech = speak(SENTENCE)
    quiet = (speech // 8).astype(np.int16)  # -18 dB
    dither = np.resize(np.array([1, -1], dtype=np.int16), 16000)
    pcm = np.concatenate([silence(300), quiet, dither, silence(400), speech])
    voiced = [vad.is_speech(f) for f in frames(pcm, 16000)]
    n_quiet, n_dither = len(quiet) // 320, len(dither) // 320
    assert sum(voiced[15 : 15 + n_quiet]) > n_quiet // 2  # the quiet voice is heard
    start = 15 + n_quiet + n_dither + 20
    assert not any(voiced[start - 20 : start])  # the zeros
    assert any(voiced[start : start + 10])  # the voice after them, within 200 ms


def test_turn_ends_the_silence_after_the_last_sound() -> None:
    """With digital silence after the words, the turn ends `silence_ms` after the last sound
    (before: 80-120 ms later, webrtcvad's hangover)."""
    det = TurnDetector(create_vad("webrtc"), TurnConfig(silence_ms=400, min_speech_ms=200))
    speech = speak(SENTENCES[1])
    pcm = np.concatenate([silence(300), speech, silence(800)])
    ended = [
        (i, ev)
        for i, f in enumerate(frames(pcm, 16000))
        for ev in det.feed(f)
        if isinstance(ev, SpeechStopped)
    ]
    assert len(ended) == 1
    (frame, stopped), last_sound = ended[0], 300 + last_sound_ms(speech)
    assert -40 <= stopped.at_ms - last_sound <= 20, stopped.at_ms - last_sound
    assert 400 <= (frame + 1) * 20 - last_sound <= 420
