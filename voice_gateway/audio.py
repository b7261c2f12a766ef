"""Audio primitives: PCM16 helpers, G.711 mu-law (numpy tables), and resampling: a low-delay
streaming polyphase FIR for live audio, soxr for whole TTS sentences. No audioop (gone in
Python 3.13). Below both the call pipeline and the providers (stt, tts, vad, protocols): it
imports nothing of the gateway."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np
import soxr


def pcm_to_array(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2")


def array_to_pcm(samples: np.ndarray) -> bytes:
    y = np.rint(samples)  # ufuncs in place: np.clip's wrapper cost more than its work here
    np.maximum(y, -32768, out=y)
    np.minimum(y, 32767, out=y)
    return y.astype("<i2").tobytes()


def pcm_to_float(pcm: bytes) -> np.ndarray:
    return pcm_to_array(pcm).astype(np.float32) / 32768.0


def rms_dbfs(pcm: bytes | np.ndarray) -> float:
    arr = pcm_to_array(pcm) if isinstance(pcm, bytes) else pcm
    if arr.size == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(arr.astype(np.float64) ** 2)))
    return 20.0 * float(np.log10(max(rms, 1e-9) / 32768.0))


# ---- G.711 mu-law ---------------------------------------------------------------------------

_BIAS, _CLIP = 0x84, 8159
_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)


def _build_ulaw_tables() -> tuple[np.ndarray, np.ndarray]:
    """The Sun/CCITT reference algorithm (as in audioop), evaluated once for every value."""
    codes = np.arange(256, dtype=np.int32)
    u = ~codes & 0xFF
    t = (((u & 0x0F) << 3) + _BIAS) << ((u & 0x70) >> 4)
    decode = np.where(u & 0x80, _BIAS - t, t - _BIAS).astype("<i2")
    val = np.arange(-32768, 32768, dtype=np.int32) >> 2  # 14-bit
    mask = np.where(val < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(val), _CLIP) + (_BIAS >> 2)
    seg = np.searchsorted(_SEG_END, mag, side="left")
    uval = (np.minimum(seg, 7) << 4) | ((mag >> (np.minimum(seg, 7) + 1)) & 0x0F)
    encode = np.where(seg >= 8, 0x7F ^ mask, uval ^ mask).astype(np.uint8)
    return decode, encode


_ULAW_DECODE, _ULAW_ENCODE = _build_ulaw_tables()


def ulaw_encode(pcm: np.ndarray) -> bytes:
    """int16 samples -> mu-law bytes (bit-exact with audioop.lin2ulaw)."""
    return _ULAW_ENCODE[pcm.astype(np.int32) + 32768].tobytes()


def ulaw_decode(data: bytes) -> np.ndarray:
    """mu-law bytes -> little-endian int16 samples (bit-exact with audioop.ulaw2lin)."""
    return _ULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


# ---- resampling -----------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _design(up: int, down: int, taps_per_phase: int) -> np.ndarray:
    """Kaiser-windowed sinc low-pass for the up-sampled rate, as a polyphase bank
    (up, taps_per_phase), gain `up` so the passband level is 1."""
    n = up * taps_per_phase
    cutoff = 0.94 / max(up, down)  # relative to the up-sampled Nyquist
    t = np.arange(n) - (n - 1) / 2
    h = cutoff * np.sinc(cutoff * t) * np.kaiser(n, 9.0) * up
    return np.ascontiguousarray(h.reshape(taps_per_phase, up).T[:, ::-1]).astype(np.float32)


class StreamingResampler:
    """Rational polyphase resampler with state, for 10-30 ms frames of live audio.

    Chunked processing gives the same samples as one call on the whole signal; the delay is
    half the filter length (~2 ms). Pure up- or down-sampling by an integer uses one
    np.convolve per phase; other ratios gather windows per output sample."""

    def __init__(self, src_rate: int, dst_rate: int, taps_per_phase: int | None = None) -> None:
        self.src_rate, self.dst_rate = src_rate, dst_rate
        ratio = Fraction(dst_rate, src_rate)
        self.up, self.down = ratio.numerator, ratio.denominator
        self.passthrough = src_rate == dst_rate
        base = 32 * max(1.0, self.down / self.up)
        self.taps = taps_per_phase or int(np.ceil(base / 2) * 2)
        self.bank = _design(self.up, self.down, self.taps) if not self.passthrough else None
        self._kernels = None if self.bank is None else np.ascontiguousarray(self.bank[:, ::-1])
        self._hist = np.zeros(self.taps - 1, dtype=np.float32)
        self._phase = 0  # next output's position on the up-sampled grid, relative to _hist[0]
        self._index_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, int]] = {}

    @property
    def delay_ms(self) -> float:
        return 0.0 if self.passthrough else (self.taps / 2) / self.src_rate * 1000

    def _indices(self, n_in: int) -> tuple[np.ndarray, np.ndarray, int]:
        key = (self._phase, n_in)
        hit = self._index_cache.get(key)
        if hit is None:
            end = n_in * self.up
            positions = np.arange(self._phase, end, self.down)
            nxt = int(positions[-1] + self.down - end) if len(positions) else self._phase - end
            hit = (positions // self.up, positions % self.up, nxt)
            if len(self._index_cache) < 64:
                self._index_cache[key] = hit
        return hit

    def process(self, pcm: bytes) -> bytes:
        if self.passthrough or not pcm:
            return pcm
        assert self.bank is not None and self._kernels is not None
        x = np.concatenate([self._hist, pcm_to_array(pcm).astype(np.float32)])
        n_in = len(x) - (self.taps - 1)
        if self.up == 1:  # decimate: filter, keep every `down`-th sample
            y = np.convolve(x, self._kernels[0], "valid")[self._phase :: self.down]
            self._phase = (self._phase - n_in) % self.down
        elif self.down == 1:  # interpolate: one filter per phase, interleaved
            y = np.empty(n_in * self.up, dtype=np.float32)
            for p in range(self.up):
                y[p :: self.up] = np.convolve(x, self._kernels[p], "valid")
        else:
            idx, ph, self._phase = self._indices(n_in)
            windows = np.lib.stride_tricks.sliding_window_view(x, self.taps)[idx]
            y = np.einsum("ij,ij->i", windows, self.bank[ph])
        self._hist = x[n_in:].copy()
        return array_to_pcm(y)

    def flush(self) -> bytes:
        """Push the held-back tail out (end of stream)."""
        return self.process(b"\x00\x00" * (self.taps // 2))


def resample_whole(pcm: bytes, src_rate: int, dst_rate: int) -> bytes:
    """High-quality resampling of a complete utterance (soxr)."""
    if src_rate == dst_rate or not pcm:
        return pcm
    out = soxr.resample(pcm_to_array(pcm), src_rate, dst_rate, quality="HQ")
    return np.asarray(out, dtype="<i2").tobytes()
