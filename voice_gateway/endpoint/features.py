"""Whisper-style log-mel features of the last 8 s of an utterance, computed as frames arrive.

Smart Turn v3 reads `input_features` (1, 80, 800): the Whisper feature extractor's output for
8 s of 16 kHz audio (front-padded with zeros), after zero-mean/unit-variance scaling of the
waveform. Scaling a waveform by 1/s shifts every log10 power by -2·log10(s), and speech has
no DC worth removing, so the per-frame log10 mel power of the raw audio is computed once per
10 ms hop as audio arrives (~20 µs per 20 ms frame) and the scaling, the max−8 clamp and the
(x+4)/4 are applied at decision time (~1 ms instead of ~24 ms for the whole window)."""

from __future__ import annotations

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


def spectrum_columns(padded: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` columns from `padded`, column i centred on sample i·HOP + N_FFT/2 of `padded` (the
    caller supplies the left context): mel power (80, n) and the complex FFT bins 0 and 1
    (2, n), the only bins a DC offset reaches through the Hann window."""
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n)[:, None]
    spec = np.fft.rfft(padded[idx] * _window(), axis=-1)
    power = spec.real**2 + spec.imag**2
    return mel_filters() @ power.T, spec[:, :2].T.copy()


def finish_features(mel: np.ndarray, low: np.ndarray, mean: float, std: float) -> np.ndarray:
    """Mel power (80, 800) and bins 0-1 of unscaled audio -> the model's input features of the
    audio scaled to zero mean and unit variance."""
    if mean:
        window_dc = np.fft.rfft(_window())[:2, None]  # a constant's spectrum: bins 0 and 1
        fixed = low - mean * window_dc
        delta = (fixed.real**2 + fixed.imag**2) - (low.real**2 + low.imag**2)
        mel = mel + mel_filters()[:, :2] @ delta
    x = np.log10(np.maximum(mel / std**2, _FLOOR))
    x = np.maximum(x, x.max() - 8.0)
    return ((x + 4.0) / 4.0).astype(np.float32)


def batch_features(audio: np.ndarray) -> np.ndarray:
    """The reference: features of float32 audio (any length; the last 8 s are used)."""
    n = WINDOW_S * RATE
    audio = audio[-n:]
    x = np.zeros(n, dtype=np.float32)
    x[n - len(audio) :] = audio
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    mel, low = spectrum_columns(padded, N_FRAMES)
    return finish_features(mel, low, 0.0, 1.0)


class IncrementalFeatures:
    """The spectrum columns of one utterance so far, kept for the last 8 s."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._mel = np.zeros((N_MELS, N_FRAMES))
        self._low = np.zeros((2, N_FRAMES), dtype=np.complex128)
        self._head = 0  # the ring's oldest column
        self._tail = np.zeros(N_FFT // 2)  # left context of the next column
        self._pending = np.zeros(0)
        self._samples: list[np.ndarray] = []  # the last 8 s, for the mean and variance
        self.n_samples = 0

    def append(self, pcm16: bytes) -> None:
        x = np.frombuffer(pcm16, dtype="<i2").astype(np.float64) / 32768.0
        self._samples.append(x)
        self.n_samples += len(x)
        while self.n_samples - len(self._samples[0]) >= WINDOW_S * RATE:
            self.n_samples -= len(self._samples.pop(0))
        buf = np.concatenate([self._tail, self._pending, x])
        n = (len(buf) - N_FFT) // HOP + 1 if len(buf) >= N_FFT else 0
        if n > 0:
            mel, low = spectrum_columns(buf, n)
            for i in range(n):  # a ring of columns: no copy of the 8 s window per frame
                self._mel[:, self._head] = mel[:, i]
                self._low[:, self._head] = low[:, i]
                self._head = (self._head + 1) % N_FRAMES
            used = n * HOP
            self._tail = buf[used : used + N_FFT // 2]
            self._pending = buf[used + N_FFT // 2 :]
        else:
            self._tail, self._pending = buf[: N_FFT // 2], buf[N_FFT // 2 :]

    @property
    def columns(self) -> int:
        """How many of the 800 columns hold audio of the utterance (the rest: front padding)."""
        return min(N_FRAMES, -(-self.n_samples // HOP))

    def features(self) -> np.ndarray:
        """(80, 800) model input for the audio appended so far (~1 ms)."""
        mel = np.roll(self._mel, -self._head, axis=1)
        low = np.roll(self._low, -self._head, axis=1)
        # the newest columns reach past the audio: reflect-pad the end, as the batch does
        extra = -(-len(self._pending) // HOP)
        if extra:
            buf = np.pad(np.concatenate([self._tail, self._pending]), (0, N_FFT // 2), "reflect")
            m2, l2 = spectrum_columns(buf, extra)
            mel = np.concatenate([mel[:, extra:], m2], axis=1)
            low = np.concatenate([low[:, extra:], l2], axis=1)
        audio = np.concatenate(self._samples) if self._samples else np.zeros(1)
        total = WINDOW_S * RATE
        mean = audio.sum() / total  # the zero padding counts, as in the batch extractor
        var = (audio**2).sum() / total - mean**2
        return finish_features(mel, low, mean, float(np.sqrt(max(var, 0.0) + 1e-7)))
