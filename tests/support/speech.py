"""Real speech for tests and benchmarks: espeak-ng at test time, resampled with soxr."""

from __future__ import annotations

import io
import re
import subprocess
import wave
from functools import lru_cache

import numpy as np
import soxr


@lru_cache(maxsize=64)
def _espeak(text: str, voice: str, speed: int) -> tuple[bytes, int]:
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "--stdout", text],
        check=True,
        capture_output=True,
    ).stdout
    # espeak-ng writes a streaming header with bogus sizes; parse the fmt/data chunks by hand.
    rate = int.from_bytes(wav[24:28], "little")
    idx = wav.find(b"data")
    return wav[idx + 8 :], rate


def speak(text: str, rate: int = 16000, voice: str = "en-us", speed: int = 160) -> np.ndarray:
    """Return int16 mono PCM of `text` spoken by espeak-ng at `rate` Hz."""
    raw, src_rate = _espeak(text, voice, speed)
    pcm = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2")
    if src_rate == rate:
        return pcm.copy()
    out = soxr.resample(pcm.astype(np.float32) / 32768.0, src_rate, rate, quality="HQ")
    return np.clip(out * 32768.0, -32768, 32767).astype(np.int16)


def silence(ms: int, rate: int = 16000) -> np.ndarray:
    return np.zeros(rate * ms // 1000, dtype=np.int16)


def noise_burst(ms: int, rate: int = 16000, dbfs: float = -10.0, seed: int = 1) -> np.ndarray:
    amp = 32767 * 10 ** (dbfs / 20)
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, rate * ms // 1000) * amp).astype(np.int16)


def frames(pcm: np.ndarray, rate: int, ms: int = 20) -> list[bytes]:
    """Split PCM into `ms` frames (the last one zero-padded) as little-endian bytes."""
    n = rate * ms // 1000
    pad = (-len(pcm)) % n
    padded = np.concatenate([pcm, np.zeros(pad, dtype=np.int16)]) if pad else pcm
    return [padded[i : i + n].astype("<i2").tobytes() for i in range(0, len(padded), n)]


def write_wav(path: str, pcm: np.ndarray, rate: int) -> None:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return buf.getvalue()


_NUM = {
    "0": "zero",
    "1": "one",
    "2": "two",
    "3": "three",
    "4": "four",
    "5": "five",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
}


def normalize(text: str) -> list[str]:
    text = re.sub(r"\d", lambda m: f" {_NUM[m.group()]} ", text.lower())
    return re.sub(r"[^a-z' ]+", " ", text).split()


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate (Levenshtein over normalised words)."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    return d[len(hyp)] / len(ref)


def rms_dbfs(pcm: np.ndarray) -> float:
    if len(pcm) == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))
    return 20 * np.log10(max(rms, 1e-9) / 32768.0)
