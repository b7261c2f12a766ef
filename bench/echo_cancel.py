"""Echo cancellers on a synthetic speakerphone: which one the gateway uses, and why.

The far end is espeak-ng speech (what the gateway sends); the microphone hears it after a
delay (40-300 ms), ~10 dB down, through a short room response, with -60 dBFS noise. Per
canceller and delay: echo return loss enhancement (ERLE) over the second half (after
convergence), over the first second (before it), and the time per 20 ms frame. Then double
talk: the caller speaks while the reply plays, with and without an acoustic echo path (a
handset has none): how much of the caller's own speech survives (dB change, per 0.5 s).
Then the double-talk guard (voice_gateway/echo/doubletalk.py) on a barge-in 2 s into the
reply, as on a call: the share of the caller's 20 ms frames the VAD (webrtcvad, mode 3) hears,
and the dB the barge-in judge reads as removed echo, without and with the guard; and on the
reply's echo alone, the share of frames taken for double talk and heard as speech.
Candidates: WebRTC AEC3 via the livekit wheel (voice_gateway/echo/apm.py) and pyaec (speexdsp),
the latter only if installed (`pip install pyaec`; not a dependency).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import webrtcvad
from _common import emit, parser

from tests.support.speech import speak
from voice_gateway.echo.apm import ApmCanceller

FAR = "Here is sentence number one of a rather long answer about tea. And here is two."
NEAR = "I would like to talk to somebody in the sales department please."


def db(x: np.ndarray) -> float:
    return float(10 * np.log10((x.astype(np.float64) ** 2).mean() + 1))


def apm_run(far: np.ndarray, mic: np.ndarray, guard: bool = True) -> tuple[np.ndarray, float]:
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0], guard=guard)
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
    results["double_talk_guard"] = guard_runs(far1, near, rng)
    emit("echo_cancel", results)


def guarded(far: np.ndarray, mic: np.ndarray, guard: bool) -> tuple[list[bool], np.ndarray, float]:
    """Per 20 ms frame: what the VAD heard after cancellation; the output; seconds of the mic
    taken for double talk."""
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0], guard=guard)
    vad, heard, out = webrtcvad.Vad(3), [], []
    for i in range(0, len(mic) - 319, 320):
        c.far(far[i : i + 320].astype("<i2").tobytes())
        clock[0] += 0.02
        got = c.near(mic[i : i + 320].astype("<i2").tobytes())
        heard.append(vad.is_speech(got, 16000))
        out.append(np.frombuffer(got, "<i2"))
    return heard, np.concatenate(out).astype(np.float64), c.double_s


def guard_runs(reply1: np.ndarray, near: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    """A caller 2 s into a ~9 s reply, without and with the guard; then the echo alone."""
    reply = np.concatenate([reply1, reply1, np.zeros(16000)])
    caller = np.zeros(len(reply))
    caller[32000 : 32000 + len(near)] = near
    said = [i for i in range(len(reply) // 320) if db(caller[i * 320 : i * 320 + 320]) > 50]
    span = slice(said[0] * 320, said[-1] * 320 + 320)
    lines = {"no_echo_path": rng.normal(0, 10, len(reply)), "echo_80ms": echo_path(reply, 80, rng)}
    out: dict[str, Any] = {"barge_in": {}, "echo_alone": {}}
    for name, line in lines.items():
        mic = np.clip(line + caller, -32768, 32767).astype(np.int16)
        for guard in (False, True):
            heard, got, _ = guarded(reply, mic, guard)
            out["barge_in"].setdefault(name, {})["guard" if guard else "no_guard"] = {
                "caller_frames_heard": round(float(np.mean([heard[i] for i in said])), 2),
                "removed_db": round(db(mic[span]) - db(got[span]), 1),
            }
    reply_s = len(reply1) * 2 / 16000
    for delay in (40, 80, 150, 300):
        mic = np.clip(echo_path(reply, delay, rng), -32768, 32767).astype(np.int16)
        off, on = guarded(reply, mic, False), guarded(reply, mic, True)
        out["echo_alone"][f"{delay}ms"] = {
            "double_talk_share": round(on[2] / reply_s, 3),
            "frames_heard_no_guard": round(float(np.mean(off[0])), 3),
            "frames_heard_guard": round(float(np.mean(on[0])), 3),
        }
    return out


if __name__ == "__main__":
    main()
