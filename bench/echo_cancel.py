"""Echo cancellers on a synthetic speakerphone: which one the gateway uses, and why.

The far end is espeak-ng speech (what the gateway sends); the microphone hears it after a
delay (40-300 ms), ~10 dB down, through a short room response, with -60 dBFS noise. Per
canceller and delay: echo return loss enhancement (ERLE) over the second half (after
convergence), over the first second (before it), and the time per 20 ms frame. Then double
talk: the caller speaks while the reply plays, with and without an acoustic echo path (a
handset has none): how much of the caller's own speech survives (dB change, per 0.5 s).
Candidates: WebRTC AEC3 via the livekit wheel (voice_gateway/echo/apm.py) and pyaec (speexdsp),
the latter only if installed (`pip install pyaec`; not a dependency).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from _common import emit, parser

from tests.support.speech import speak
from voice_gateway.echo.apm import ApmCanceller

FAR = "Here is sentence number one of a rather long answer about tea. And here is two."
NEAR = "I would like to talk to somebody in the sales department please."


def db(x: np.ndarray) -> float:
    return float(10 * np.log10((x.astype(np.float64) ** 2).mean() + 1))


def apm_run(far: np.ndarray, mic: np.ndarray) -> tuple[np.ndarray, float]:
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0])
    out = []
    start = time.perf_counter()
    for i in range(0, len(mic) - 319, 320):
        c.far(far[i : i + 320].astype("<i2").tobytes())
        clock[0] += 0.02
        out.append(np.frombuffer(c.near(mic[i : i + 320].astype("<i2").tobytes()), "<i2"))
    return np.concatenate(out), (time.perf_counter() - start) / len(out) * 1000


def pyaec_run(far: np.ndarray, mic: np.ndarray) -> tuple[np.ndarray, float] | None:
    try:
        import pyaec  # type: ignore[import-not-found]
    except ImportError:
        return None
    a = pyaec.Aec(160, 1600, 16000, True)
    out = []
    start = time.perf_counter()
    for i in range(0, len(mic) - 159, 160):
        got = a.cancel_echo(mic[i : i + 160].tolist(), far[i : i + 160].astype(np.int16).tolist())
        out.append(np.array(got, dtype=np.int16))
    return np.concatenate(out), (time.perf_counter() - start) / len(out) * 2000


def echo_path(far: np.ndarray, delay_ms: int, rng: np.random.Generator) -> np.ndarray:
    d = delay_ms * 16
    echo = np.concatenate([np.zeros(d), far])[: len(far)] * 0.3
    echo = np.convolve(echo, [1.0, 0.3, 0.0, 0.1])[: len(echo)]
    return echo + rng.normal(0, 32, len(echo))


def main() -> None:
    parser(__doc__ or "").parse_args()
    rng = np.random.default_rng(1)
    far1 = speak(FAR).astype(np.float64)
    far = np.concatenate([far1, far1])
    results: dict[str, Any] = {"erle": {}, "double_talk": {}}
    for delay in (40, 80, 150, 300):
        mic = np.clip(echo_path(far, delay, rng), -32768, 32767).astype(np.int16)
        echo = mic.astype(np.float64)
        for name, run in (("webrtc_aec3", apm_run), ("pyaec", pyaec_run)):
            got = run(far, mic)
            if got is None:
                results["erle"][name] = "not installed"
                continue
            out, ms = got
            half, sec = len(out) // 2, 16000
            results["erle"].setdefault(name, {})[f"{delay}ms"] = {
                "converged_db": round(db(echo[half : len(out)]) - db(out[half:]), 1),
                "first_second_db": round(db(echo[:sec]) - db(out[:sec]), 1),
                "ms_per_20ms_frame": round(ms, 3),
            }
    near = speak(NEAR).astype(np.float64)
    n = len(near)
    reply = np.resize(far1, n)
    for coupled in (True, False):
        echo = echo_path(reply, 80, rng) if coupled else rng.normal(0, 32, n)
        mic = np.clip(near + echo, -32768, 32767).astype(np.int16)
        for name, run in (("webrtc_aec3", apm_run), ("pyaec", pyaec_run)):
            got = run(reply, mic)
            if got is None:
                continue
            out = got[0].astype(np.float64)
            steps = range(0, len(out) - 8000, 8000)
            kept = [round(db(out[i : i + 8000]) - db(near[i : i + 8000]), 1) for i in steps]
            key = "echo_path" if coupled else "no_echo_path"
            results["double_talk"].setdefault(name, {})[key] = kept
    emit("echo_cancel", results)


if __name__ == "__main__":
    main()
