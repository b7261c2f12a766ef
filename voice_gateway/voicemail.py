"""Answering-machine detection from the call's own audio and words, on every transport.

Three signals, any one of which makes the verdict `machine`:

- the beep: a steady tone in 800-1500 Hz (one Goertzel bank over each 20 ms frame) holding
  at least 300 ms, most of the frame's energy in that one tone. DTMF is two tones of equal
  strength, half the energy each: never a beep.
- the words of the first transcript: "leave a message", "after the tone", "voicemail"...
- a long first utterance: more than 6 s of sound before any pause (a greeting, not a "Hello?").

A first transcript with none of these makes the verdict `human`. The detector only judges;
what the call does about it is pipeline/voicemail.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

RATE = 16000
FRAME = 320  # 20 ms at 16 kHz
FRAME_MS = 20
BEEP_BAND_HZ = (800, 1500)
BEEP_STEP_HZ = 25  # the bank's spacing: a tone between two bins loses < 20 % of its power
BEEP_MIN_MS = 300
BEEP_SHARE = 0.6  # of the frame's energy in the strongest bin (DTMF: <= 0.5)
BEEP_DRIFT_HZ = 50  # the tone's frequency may move this much from frame to frame
SOUND_RMS = 300.0  # PCM16: quieter than this is silence (about -41 dBFS)
PAUSE_MS = 300  # a pause ends an utterance
LONG_GREETING_MS = 6000
# what a machine's greeting says (as speech-to-text may hear it: "you reach him, please leave
# my message" is a greeting too)
PHRASES = re.compile(
    r"\bleave (a |your |me a |my )?(short |brief )?message\b|\b(after|at) the (tone|beep)\b"
    r"|\b(not|un) ?available\b|\bcan(not|'t) (come to|take) the (phone|call)\b"
    r"|\bvoice ?mail|\bmail ?box\b|\brecord (your|a) message\b"
    r"|\byou(('ve| have)? reached| reach)\b"
)
BEEP_LATE_MS = 15000  # a beep this early in the call overrules a "Hello" heard as a person
_FREQS = np.arange(BEEP_BAND_HZ[0], BEEP_BAND_HZ[1] + 1, BEEP_STEP_HZ, dtype=np.float64)
_T = np.arange(FRAME, dtype=np.float64) / RATE
_BANK = np.exp(-2j * np.pi * np.outer(_FREQS, _T))  # one Goertzel bin per row
_WORDS = re.compile(r"[^a-z' ]+")

Kind = Literal["human", "machine"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Who answered, and what told: `beep`, `phrase`, `long_greeting`, `first_words` (a
    first transcript with no sign of a machine) or `twilio` (its AnsweredBy)."""

    answered_by: Kind
    detected_by: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        found = {"answered_by": self.answered_by, "detected_by": self.detected_by}
        return {**found, "detail": self.detail} if self.detail else found


def tone_of(frame: np.ndarray) -> tuple[float, float]:
    """(frequency, share of the frame's energy) of the strongest bin of the beep band."""
    x = frame.astype(np.float64)
    energy = float(np.dot(x, x))
    if energy <= 0.0:
        return 0.0, 0.0
    power = np.abs(_BANK @ x) ** 2
    peak = int(np.argmax(power))
    # a sinusoid's bin power is (A N / 2)^2 and its energy A^2 N / 2: the share is 1
    return float(_FREQS[peak]), float(2.0 * power[peak] / (FRAME * energy))


def phrase_in(text: str) -> str | None:
    """The voicemail phrase `text` contains, if any."""
    words = " ".join(_WORDS.sub(" ", text.lower().replace("\u2019", "'")).split())
    found = PHRASES.search(words)
    return found.group(0) if found else None


class BeepDetector:
    """Fed 20 ms frames of 16 kHz PCM16; `frame` is True on the frame a beep is confirmed."""

    __slots__ = ("_hz", "_run", "fired")

    def __init__(self) -> None:
        self._run = 0  # frames of the current steady tone
        self._hz = 0.0
        self.fired = False

    @property
    def sounding(self) -> bool:
        """A steady tone is under way (a beep, once `fired`, is still going)."""
        return self._run > 0

    def frame(self, samples: np.ndarray) -> bool:
        rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if len(samples) else 0.0
        hz, share = tone_of(samples) if rms >= SOUND_RMS else (0.0, 0.0)
        if share >= BEEP_SHARE and (self._run == 0 or abs(hz - self._hz) <= BEEP_DRIFT_HZ):
            self._run, self._hz = self._run + 1, hz
        else:
            self._run, self._hz = (1, hz) if share >= BEEP_SHARE else (0, 0.0)
        if self._run * FRAME_MS >= BEEP_MIN_MS and not self.fired:
            self.fired = True
            return True
        if self._run == 0:
            self.fired = False  # the next tone may be a beep again
        return False


class VoicemailDetector:
    """The three signals of one call. `frame` per 20 ms (a `Verdict` when the beep or a long
    greeting decides it), `transcript` per final transcript (the verdict once decided)."""

    __slots__ = ("beep", "heard_ms", "quiet_ms", "sound_ms", "verdict")

    def __init__(self) -> None:
        self.beep = BeepDetector()
        self.verdict: Verdict | None = None
        self.sound_ms = 0  # the current utterance, pauses shorter than PAUSE_MS included
        self.quiet_ms = 0  # since the last sound
        self.heard_ms = 0  # of the call

    def frame(self, pcm: bytes) -> Verdict | None:
        samples = np.frombuffer(pcm, dtype="<i2")
        self.heard_ms += FRAME_MS
        rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2))) if len(samples) else 0.0
        if rms >= SOUND_RMS:
            self.sound_ms, self.quiet_ms = self.sound_ms + FRAME_MS, 0
        else:
            self.quiet_ms += FRAME_MS
            if self.quiet_ms >= PAUSE_MS:
                self.sound_ms = 0
        beep = self.beep.frame(samples)
        if beep and (self.verdict is None or self.overruled()):
            self.verdict = Verdict("machine", "beep")
            return self.verdict
        if beep and self.verdict is not None and self.verdict.answered_by == "machine":
            return Verdict("machine", "beep")  # (a verdict by words: the greeting is over)
        if self.verdict is None and self.sound_ms > LONG_GREETING_MS:
            self.verdict = Verdict("machine", "long_greeting")
            return self.verdict
        return None

    def overruled(self) -> bool:
        """A beep now overrules the verdict: a person only by first words, early in the call
        (the greeting's words misheard); later, a tone in a conversation is not a machine."""
        v = self.verdict
        return v is not None and v.detected_by == "first_words" and self.heard_ms <= BEEP_LATE_MS

    def transcript(self, text: str) -> Verdict:
        """The verdict once the first words are heard (a later transcript changes nothing)."""
        if self.verdict is None:
            phrase = phrase_in(text)
            self.verdict = (
                Verdict("machine", "phrase", phrase) if phrase else Verdict("human", "first_words")
            )
        return self.verdict
