"""voice_gateway/audio.py: PCM16 helpers, G.711 mu-law, the streaming polyphase resampler, soxr."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from voice_gateway.audio import (
    StreamingResampler,
    array_to_pcm,
    pcm_to_array,
    pcm_to_float,
    resample_whole,
    rms_dbfs,
    ulaw_decode,
    ulaw_encode,
)

RATES = (8000, 16000, 24000, 44100, 48000)


def tone(freq: float, rate: int, seconds: float = 1.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.rint(np.sin(2 * np.pi * freq * t) * amp * 32767).astype("<i2")


def level_db(x: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    return 20 * np.log10(max(rms, 1e-3) / 32768)


def stream(r: StreamingResampler, x: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Feed `x` in chunks of the given sizes (cycled), then flush."""
    out, i, k = [], 0, 0
    while i < len(x):
        n = sizes[k % len(sizes)]
        out.append(r.process(x[i : i + n].tobytes()))
        i, k = i + n, k + 1
    out.append(r.flush())
    return pcm_to_array(b"".join(out))


# ---- PCM16 helpers ---------------------------------------------------------------------------


def test_pcm_round_trip_and_clipping() -> None:
    x = np.array([0, 1, -1, 32767, -32768, 1234], dtype=np.int16)
    assert np.array_equal(pcm_to_array(x.astype("<i2").tobytes()), x)
    assert (
        array_to_pcm(np.array([40000.0, -40000.0, 0.4, 0.6, -1.5]))
        == np.array([32767, -32768, 0, 1, -2], dtype="<i2").tobytes()
    )
    f = pcm_to_float(np.array([16384, -32768], dtype="<i2").tobytes())
    assert f.dtype == np.float32 and f.tolist() == [0.5, -1.0]


def test_rms_dbfs() -> None:
    full = tone(1000, 16000, amp=1.0)
    assert rms_dbfs(full.tobytes()) == pytest.approx(-3.01, abs=0.05)  # a full-scale sine
    assert rms_dbfs(tone(1000, 16000, amp=0.1)) == pytest.approx(-23.01, abs=0.05)
    assert rms_dbfs(b"") == -120.0
    assert rms_dbfs(np.zeros(160, dtype=np.int16)) < -150


# ---- G.711 mu-law ----------------------------------------------------------------------------

# G.711 mu-law reference pairs, worked by hand from the Sun/CCITT reference code (the one
# audioop implements): 14-bit magnitude + bias 33, segment = position of the top bit, 4 bits of
# mantissa, all bits inverted. Decoding: ((mantissa << 3) + 132) << segment, minus 132.
ENCODE_REFERENCE = [
    (0, 0xFF),
    (-1, 0x7E),
    (8, 0xFE),
    (-8, 0x7E),
    (100, 0xF2),
    (-100, 0x72),
    (1000, 0xCE),
    (-1000, 0x4E),
    (10000, 0x9C),
    (32767, 0x80),
    (-32768, 0x00),
]
DECODE_REFERENCE = [
    (0xFF, 0),
    (0x7F, 0),
    (0xFE, 8),
    (0x7E, -8),
    (0xF0, 120),
    (0x80, 32124),
    (0x00, -32124),
    (0xC0, 1884),
    (0x40, -1884),
]


@pytest.mark.parametrize(("linear", "code"), ENCODE_REFERENCE)
def test_ulaw_encode_reference_values(linear: int, code: int) -> None:
    assert ulaw_encode(np.array([linear], dtype=np.int16)) == bytes([code])


@pytest.mark.parametrize(("code", "linear"), DECODE_REFERENCE)
def test_ulaw_decode_reference_values(code: int, linear: int) -> None:
    assert int(ulaw_decode(bytes([code]))[0]) == linear


def test_ulaw_matches_audioop_for_every_value() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # gone in Python 3.13
    every = np.arange(-32768, 32768, dtype=np.int16)
    assert ulaw_encode(every) == audioop.lin2ulaw(every.astype("<i2").tobytes(), 2)
    codes = bytes(range(256))
    assert ulaw_decode(codes).astype("<i2").tobytes() == audioop.ulaw2lin(codes, 2)


def test_ulaw_round_trip_error_is_within_one_step() -> None:
    x = np.arange(-32000, 32000, 7, dtype=np.int16)
    y = ulaw_decode(ulaw_encode(x)).astype(np.int32)
    err = np.abs(y - x.astype(np.int32))
    # mu-law quantisation: the step doubles per segment; half a step of error at most
    assert np.all(err <= np.maximum(16, np.abs(x.astype(np.int32)) // 16 + 132))
    assert ulaw_decode(ulaw_encode(x)).dtype == np.int16


# ---- streaming resampler ---------------------------------------------------------------------

PAIRS = [(r, 16000) for r in RATES if r != 16000] + [(16000, r) for r in RATES if r != 16000]


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_chunked_output_equals_one_shot_output(src: int, dst: int) -> None:
    """Continuity across chunk boundaries: any chunking gives the same samples."""
    x = (np.random.default_rng(7).standard_normal(src) * 3000).astype("<i2")
    whole = stream(StreamingResampler(src, dst), x, [len(x)])
    frames20 = stream(StreamingResampler(src, dst), x, [src // 50])
    ragged = stream(StreamingResampler(src, dst), x, [1, 37, src // 100, 3, 509, 2])
    assert np.array_equal(frames20, whole)
    assert np.array_equal(ragged, whole)


@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_output_length_and_passband(src: int, dst: int) -> None:
    x = tone(1000, src)
    r = StreamingResampler(src, dst)
    frames = [r.process(x[i : i + src // 50].tobytes()) for i in range(0, len(x), src // 50)]
    y = pcm_to_array(b"".join(frames))
    assert len(y) == len(x) * dst // src  # 20 ms in -> 20 ms out, no drift
    assert all(len(f) == dst // 50 * 2 for f in frames)
    # a 1 kHz tone keeps its level (skip the filter's start-up)
    assert level_db(y[dst // 50 :]) == pytest.approx(level_db(x), abs=0.05)
    # and its frequency: the output is a clean 1 kHz tone at the new rate
    spectrum = np.abs(np.fft.rfft(y[dst // 50 :] * np.hanning(len(y) - dst // 50)))
    peak_hz = np.fft.rfftfreq(len(y) - dst // 50, 1 / dst)[int(np.argmax(spectrum))]
    assert peak_hz == pytest.approx(1000, abs=2)


@pytest.mark.parametrize("src", [24000, 44100, 48000])
@pytest.mark.parametrize(("above", "max_db"), [(1.1, -55.0), (1.3, -85.0)])
def test_alias_rejection_downsampling(src: int, above: float, max_db: float) -> None:
    """A tone above the new Nyquist frequency must not fold back into the band."""
    for dst in (8000, 16000):
        freq = dst / 2 * above
        x = tone(freq, src)
        y = pcm_to_array(StreamingResampler(src, dst).process(x.tobytes()))
        assert level_db(y[dst // 50 :]) - level_db(x) < max_db, (src, dst, freq)


def test_naive_decimation_would_alias() -> None:
    """The measurement above can fail: dropping samples without a filter aliases at ~0 dB."""
    x = tone(5000, 16000)
    assert level_db(x[::2]) - level_db(x) > -1.0
    y = pcm_to_array(StreamingResampler(16000, 8000).process(x.tobytes()))
    assert level_db(y[160:]) - level_db(x) < -80


@pytest.mark.parametrize("dst", [24000, 44100, 48000])
def test_imaging_rejection_upsampling(dst: int) -> None:
    src = 16000
    y = pcm_to_array(StreamingResampler(src, dst).process(tone(5600, src).tobytes()))
    y = y.astype(np.float64) * np.hanning(len(y))
    spectrum = np.abs(np.fft.rfft(y))
    freqs = np.fft.rfftfreq(len(y), 1 / dst)
    images = spectrum[freqs > src / 2 * 1.05].max()
    assert 20 * np.log10(images / spectrum.max()) < -80


@pytest.mark.parametrize(("src", "dst"), [(8000, 16000), (48000, 16000), (44100, 16000)])
def test_delay_is_low_and_as_reported(src: int, dst: int) -> None:
    r = StreamingResampler(src, dst)
    assert r.delay_ms <= 2.5  # low delay: a couple of ms, unlike soxr's 30-85 ms
    x = np.zeros(src // 10, dtype="<i2")
    x[src // 50] = 20000  # an impulse at 20 ms
    y = pcm_to_array(r.process(x.tobytes())).astype(np.float64)
    measured_ms = (int(np.argmax(np.abs(y))) / dst - 0.020) * 1000
    assert measured_ms == pytest.approx(r.delay_ms, abs=1000 / dst + 0.05)


def test_same_rate_is_passthrough() -> None:
    r = StreamingResampler(16000, 16000)
    data = tone(440, 16000, 0.02).tobytes()
    assert r.passthrough and r.process(data) is data and r.delay_ms == 0.0


# ---- whole-sentence resampling (soxr) --------------------------------------------------------


@pytest.mark.parametrize("dst", [8000, 16000, 24000, 48000])
def test_resample_whole_keeps_tone_and_length(dst: int) -> None:
    x = tone(440, 22050)
    y = pcm_to_array(resample_whole(x.tobytes(), 22050, dst))
    assert abs(len(y) - dst) <= 1
    assert level_db(y[100:-100]) == pytest.approx(level_db(x), abs=0.1)
    assert resample_whole(b"", 22050, dst) == b""
