"""Keypad tones (voice_gateway/pipeline/dtmf.py) decoded back with the Goertzel algorithm, as
a receiver on a phone line would: each key's two strongest of the eight DTMF frequencies are
its row and column, the twist and the gaps as Q.24 receivers expect; the same after the
mu-law of a Twilio stream."""

from __future__ import annotations

import math

import numpy as np
import pytest

from voice_gateway.audio import ulaw_decode, ulaw_encode
from voice_gateway.pipeline.dtmf import COLUMNS, GAP_S, KEYS, ROWS, TONE_S, dtmf_pcm, frequencies

ALL_KEYS = "".join(KEYS)


def goertzel(block: np.ndarray, freq: float, rate: int) -> float:
    """The power of `freq` in `block` (the frequency itself, not the nearest bin)."""
    coeff = 2 * math.cos(2 * math.pi * freq / rate)
    s1 = s2 = 0.0
    for x in block:
        s1, s2 = x + coeff * s1 - s2, s1
    return s1 * s1 + s2 * s2 - coeff * s1 * s2


def decode(pcm: np.ndarray, rate: int) -> str:
    """Keys heard in `pcm`: a block (40 ms, Hann-windowed) is a key when one row and one
    column frequency stand out; a key is reported once per run of blocks; a quiet block
    separates presses."""
    block = rate // 25
    window = np.hanning(block)
    keys, last = [], None
    for i in range(0, len(pcm) - block + 1, block // 2):
        chunk = pcm[i : i + block].astype(np.float64) * window
        if np.sqrt(np.mean(chunk**2)) < 300:
            last = None
            continue
        rows = [goertzel(chunk, f, rate) for f in ROWS]
        cols = [goertzel(chunk, f, rate) for f in COLUMNS]
        r, c = int(np.argmax(rows)), int(np.argmax(cols))
        # the winner stands out of its group (>= 8x the next: 9 dB)
        if sorted(rows)[-2] * 8 > rows[r] or sorted(cols)[-2] * 8 > cols[c]:
            continue
        key = KEYS[r][c]
        if key != last:
            keys.append(key)
        last = key
    return "".join(keys)


@pytest.mark.parametrize("rate", [8000, 16000, 24000])
def test_every_key_decodes_to_itself(rate: int) -> None:
    pcm = np.frombuffer(dtmf_pcm(ALL_KEYS, rate), dtype="<i2")
    assert decode(pcm, rate) == ALL_KEYS
    assert len(pcm) == round(len(ALL_KEYS) * (TONE_S + GAP_S) * rate)
    assert np.abs(pcm).max() < 32767 * 0.7  # two sines at 0.3 each: no clipping


def test_a_repeated_key_is_two_presses_and_pauses_have_their_length() -> None:
    rate = 8000
    pcm = np.frombuffer(dtmf_pcm("55w#W1", rate), dtype="<i2")
    assert decode(pcm, rate) == "55#1"
    tone = round(TONE_S * rate)
    gap = round(GAP_S * rate)
    # 5, gap, 5, gap, half a second, #, gap, a second, 1, gap
    assert len(pcm) == 4 * (tone + gap) + rate // 2 + rate
    pause = pcm[2 * (tone + gap) : 2 * (tone + gap) + rate // 2]
    assert not pause.any()


def test_through_a_twilio_stream_mu_law() -> None:
    rate = 8000
    pcm = np.frombuffer(dtmf_pcm("0123456789*#", rate), dtype="<i2")
    heard = ulaw_decode(ulaw_encode(pcm))
    assert decode(heard, rate) == "0123456789*#"


def test_the_decoder_hears_a_wrong_pair_as_another_key() -> None:
    """The decoder is not blind: a tone pair of another key decodes to that key."""
    rate = 8000
    t = np.arange(round(TONE_S * rate)) / rate
    low, high = frequencies("9")
    nine = (0.3 * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)) * 32767).astype(
        np.int16
    )
    assert decode(nine, rate) == "9"
    assert decode(np.frombuffer(dtmf_pcm("8", rate), dtype="<i2"), rate) != "9"


def test_not_a_key() -> None:
    with pytest.raises(ValueError, match="not a keypad key"):
        dtmf_pcm("1x", 8000)
