"""The answering-machine detector (voice_gateway/voicemail.py) on real audio: a steady 1 kHz
beep is one; espeak speech, noise, DTMF (single keys and a long dual tone) and a short tone
are not; voicemail phrases and a long greeting make a machine, a short "Hello?" a human."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.speech import frames, noise_burst, silence, speak
from voice_gateway.pipeline.dtmf import dtmf_pcm
from voice_gateway.voicemail import (
    BeepDetector,
    Verdict,
    VoicemailDetector,
    phrase_in,
    tone_of,
)

RATE = 16000


def tone(hz: float, ms: int, level: float = 0.3, *also: float) -> np.ndarray:
    t = np.arange(RATE * ms // 1000) / RATE
    wave = np.mean([np.sin(2 * np.pi * f * t) for f in (hz, *also)], axis=0)
    return (wave * level * 32767).astype(np.int16)


def beeps(pcm: np.ndarray) -> list[int]:
    """The frames (20 ms each) a beep was confirmed on."""
    det = BeepDetector()
    return [i for i, f in enumerate(frames(pcm, RATE)) if det.frame(np.frombuffer(f, "<i2"))]


@pytest.mark.parametrize("hz", [800, 1000, 1004, 1400, 1487])
def test_a_steady_tone_is_a_beep_after_300_ms(hz: int) -> None:
    pcm = np.concatenate([silence(200), tone(hz, 500), silence(200)])
    assert beeps(pcm) == [10 + 15 - 1]  # confirmed on its 15th frame, once
    freq, share = tone_of(tone(hz, 20))
    assert abs(freq - hz) <= 12.5 and share > 0.8


def test_a_short_tone_is_not_a_beep() -> None:
    assert beeps(np.concatenate([tone(1000, 240), silence(300)])) == []


def test_dtmf_is_not_a_beep() -> None:
    keys = np.frombuffer(dtmf_pcm("5551234#", RATE), "<i2")
    assert beeps(keys) == []
    # a held key: both of its tones, a second long, inside the beep band
    held = tone(1336, 1000, 0.3, 941)
    assert beeps(held) == []
    assert tone_of(held[:320])[1] < 0.6


def test_speech_and_noise_are_not_a_beep() -> None:
    greeting = speak("Hi, you've reached Sam, please leave a message after the tone.")
    assert beeps(greeting) == []
    assert beeps(noise_burst(1000, dbfs=-10.0)) == []
    # ...and the same greeting followed by a beep has one, at the beep
    pcm = np.concatenate([greeting, silence(300), tone(1000, 500)])
    (at,) = beeps(pcm)
    assert at * 320 >= len(greeting) + 300 * 16


def test_phrases() -> None:
    assert phrase_in("Hi, you've reached Sam. Please leave a message after the tone.")
    assert phrase_in("The person you are calling is not available") == "not available"
    assert phrase_in("Welcome to the VOICEMAIL of Dana") == "voicemail"
    assert phrase_in("I'm unable to take your call") is None  # no sign of a machine alone
    # as speech-to-text heard an espeak greeting on a phone line
    assert phrase_in("Hi, you reach him, please leave my message after my own.")
    assert phrase_in("Hello?") is None
    assert phrase_in("Yes, this is Bob speaking, who is it?") is None


def test_verdicts() -> None:
    det = VoicemailDetector()
    assert det.transcript("Hello?") == Verdict("human", "first_words")
    # decided: a later phrase, or a beep once the call is under way, changes nothing
    assert det.transcript("leave a message") == Verdict("human", "first_words")
    assert all(det.frame(f) is None for f in frames(silence(15_000), RATE))
    assert all(det.frame(f) is None for f in frames(tone(1000, 600), RATE))
    assert det.verdict == Verdict("human", "first_words")
    # early in the call, a beep overrules first words (a misheard greeting)
    det = VoicemailDetector()
    assert det.transcript("Hi, you're here.") == Verdict("human", "first_words")
    found = [v for f in frames(tone(1000, 600), RATE) if (v := det.frame(f)) is not None]
    assert found == [Verdict("machine", "beep")] and det.verdict == found[0]
    # ...but not a person by Twilio's word
    det = VoicemailDetector()
    det.verdict = Verdict("human", "twilio", "human")
    assert all(det.frame(f) is None for f in frames(tone(1000, 600), RATE))

    det = VoicemailDetector()
    verdict = det.transcript("Please leave a message after the beep.")
    assert verdict.as_dict() == {
        "answered_by": "machine",
        "detected_by": "phrase",
        "detail": "leave a message",
    }
    # the beep still says the greeting is over
    found = [v for f in frames(tone(1000, 600), RATE) if (v := det.frame(f)) is not None]
    assert found == [Verdict("machine", "beep")] and det.verdict == verdict


def test_a_long_greeting_is_a_machine() -> None:
    det = VoicemailDetector()
    text = (
        "Thank you for calling the offices of Doctor Patel and associates. Our hours are "
        "nine to five, Monday through Friday, and we will return your call as soon as we can."
    )
    speech = speak(text, speed=200)
    found = [v for f in frames(speech, RATE) if (v := det.frame(f)) is not None]
    assert found == [Verdict("machine", "long_greeting")], len(speech) / RATE
    short = VoicemailDetector()
    assert all(short.frame(f) is None for f in frames(speak("Hello? Who is this?"), RATE))
    assert short.verdict is None
