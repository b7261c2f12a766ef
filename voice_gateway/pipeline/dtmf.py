"""Keypad tones (DTMF) as audio: each key is a pair of sines, a row tone of 697/770/852/941 Hz
and a column tone of 1209/1336/1477/1633 Hz (ITU-T Q.23), played TONE_S then GAP_S of silence;
'w' is a half-second pause and 'W' a second. Played in-band, as a phone line carries them."""

from __future__ import annotations

import numpy as np

ROWS = (697, 770, 852, 941)
COLUMNS = (1209, 1336, 1477, 1633)
KEYS = ("123A", "456B", "789C", "*0#D")
TONE_S = 0.1
GAP_S = 0.1
PAUSES_S = {"w": 0.5, "W": 1.0}
LEVEL = 0.3  # of full scale per sine (about -10 dBFS each; their sum stays below clipping)
FADE_S = 0.004  # ramps at each end of a tone: no click


def frequencies(key: str) -> tuple[int, int]:
    """The (row, column) frequencies of a keypad key."""
    for row, keys in zip(ROWS, KEYS, strict=True):
        if key in keys:
            return row, COLUMNS[keys.index(key)]
    raise ValueError(f"not a keypad key: {key!r}")


def dtmf_pcm(digits: str, rate: int) -> bytes:
    """PCM16 LE mono at `rate` of `digits` (0-9 * # A-D, w and W pauses)."""
    n = round(TONE_S * rate)
    t = np.arange(n) / rate
    ramp = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / (FADE_S * rate))
    gap = np.zeros(round(GAP_S * rate))
    parts: list[np.ndarray] = []
    for key in digits:
        if key in PAUSES_S:
            parts.append(np.zeros(round(PAUSES_S[key] * rate)))
            continue
        low, high = frequencies(key)
        tone = LEVEL * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)) * ramp
        parts += [tone, gap]
    if not parts:
        return b""
    return (np.concatenate(parts) * 32767).astype("<i2").tobytes()
