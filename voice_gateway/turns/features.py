"""Whisper-style log-mel features of the last 8 s of an utterance, computed when a pause asks.

Smart Turn v3 reads `input_features` (1, 80, 800): the Whisper feature extractor's output for
8 s of 16 kHz audio (front-padded with zeros), after zero-mean/unit-variance scaling of the
waveform. `window_features` computes the last `width` of those columns (the window the model
runs on: turns/window.py) and, of those, only the ones that reach the audio: every column
of the front padding is the same, so one stands for all. One batched FFT costs ~6 µs a column
(an Intel Xeon) where the same columns computed frame by frame as audio arrived cost ~23 µs a
20 ms frame on the event loop; so a call's audio is only kept as it arrives (`RecentPcm`,
~0.5 µs a frame) and the features are computed on the model's worker thread at the pause
(on an AMD Zen 3: ~1 ms for 1 s of speech, 2-4 ms for 2 s, 6.5 ms for 4 s). Computed
incrementally on the event loop, at 64 calls they were a third of its per-frame work
(docs/benchmarks.md, turn_capacity)."""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

RATE = 16000
N_FFT, HOP, N_MELS = 400, 160, 80
WINDOW_S = 8
N_FRAMES = WINDOW_S * RATE // HOP  # 800
_FLOOR = 1e-10


def _hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    lin = f / (200.0 / 3)
    logstep = np.log(6.4) / 27.0
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) / logstep, lin)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    logstep = np.log(6.4) / 27.0
    return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * (200.0 / 3))


@lru_cache(maxsize=1)
def mel_filters() -> np.ndarray:
    """(80, 201) triangular filters on the rFFT bins, area-normalised (librosa's slaney)."""
    fft_freqs = np.linspace(0, RATE / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(RATE / 2), N_MELS + 2))
    lower = (fft_freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - fft_freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    return np.hanning(N_FFT + 1)[:-1]  # periodic Hann, as torch.hann_window


def spectrum_columns(padded: np.ndarray, n: int) -> np.ndarray:
    """Mel power (80, n) of `n` columns from `padded`, column i centred on sample
    i·HOP + N_FFT/2 of `padded` (the caller supplies the left context)."""
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[: n * HOP : HOP]
    spec = np.fft.rfft(frames * _window(), axis=-1)
    return mel_filters() @ (spec.real**2 + spec.imag**2).T


def finish_features(mel: np.ndarray) -> np.ndarray:
    """Mel power of audio scaled to zero mean and unit variance -> the model's features."""
    x = np.log10(np.maximum(mel, _FLOOR))
    x = np.maximum(x, x.max() - 8.0)
    return ((x + 4.0) / 4.0).astype(np.float32)


def _scaled(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of float32 audio, front-padded with zeros, at zero mean and unit variance."""
    n = WINDOW_S * RATE
    audio = audio[-n:]
    x = np.zeros(n, dtype=np.float32)
    x[n - len(audio) :] = audio
    return (x - x.mean()) / np.sqrt(x.var() + 1e-7)


def batch_features(audio: np.ndarray) -> np.ndarray:
    """The reference: features of float32 audio (any length; the last 8 s are used)."""
    x = _scaled(audio)
    padded = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    return finish_features(spectrum_columns(padded, N_FRAMES))


def window_features(pcm16: bytes, width: int = N_FRAMES) -> np.ndarray:
    """(80, width): the last `width` columns of `batch_features` of the PCM16 audio (the last
    8 s are used), computing only the columns that reach the audio and one of the padding."""
    n = WINDOW_S * RATE
    audio = np.frombuffer(pcm16, dtype="<i2")[-n:].astype(np.float32) / 32768
    x = _scaled(audio)
    pad, half = n - len(audio), N_FFT // 2  # column i spans samples [i·HOP - half, i·HOP + half)
    first = max(0, (pad - half) // HOP)  # the last column of padding alone, or 0
    lo = first * HOP  # where it starts in the reflect-padded signal (`half` samples ahead)
    head = x[1 : half + 1][::-1][lo:]  # the reflected start, if the first column reaches it
    padded = np.concatenate([head, x[max(0, lo - half) :], x[-half - 1 : -1][::-1]])
    # the max−8 clamp sees one column of the padding, as it sees all of them in the batch
    out = finish_features(spectrum_columns(padded.astype(np.float64), N_FRAMES - first))
    if first > N_FRAMES - width:
        return np.concatenate([np.repeat(out[:, :1], first - (N_FRAMES - width), axis=1), out], 1)
    return out[:, out.shape[1] - width :]


def columns_of(pcm16: bytes) -> int:
    """How many of the 800 columns hold audio of the utterance (the rest: front padding)."""
    return min(N_FRAMES, -(-(len(pcm16) // 2) // HOP))


class RecentPcm:
    """The last `keep` samples of PCM16 audio as it arrives: the frames themselves, kept
    without copying (~0.5 µs a frame); `pcm()` joins them."""

    def __init__(self, keep: int = WINDOW_S * RATE) -> None:
        self.keep = keep
        self.frames: deque[bytes] = deque()
        self.n_samples = 0

    def reset(self) -> None:
        self.frames.clear()
        self.n_samples = 0

    def append(self, pcm16: bytes) -> None:
        self.frames.append(pcm16)
        self.n_samples += len(pcm16) // 2
        while self.n_samples - len(self.frames[0]) // 2 >= self.keep:
            self.n_samples -= len(self.frames.popleft()) // 2

    def pcm(self) -> bytes:
        """The last `keep` samples (or fewer, all there is) as one PCM16 buffer."""
        data = b"".join(self.frames)
        return data[-2 * self.keep :]
