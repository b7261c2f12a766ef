"""The echo canceller when the caller's playback stops and restarts mid-reply.

A reply of six sentences, each sent when the previous one has played plus a gap (the next
sentence's synthesis late: an underrun). The gateway schedules the canceller's reference on
its own clock (voice_gateway/echo/apm.py); the caller's device restarts its playback when the
next audio reaches it, late by that packet's downlink jitter (uniform 0-J ms), so after every
restart the echo comes back that much off the path the canceller had learned. Two ways to
send the reply: `restarts` (the gap sent as nothing: the device runs dry and restarts) and
`kept_playing` (the gap sent as silence, as pipeline/speech.py does from the first frame to
the last: the device never runs dry and the jitter is absorbed by what it holds). Per jitter:
ERLE over the reply's loud frames after the first second (median of three seeds), and the
share of those frames with less than 10 dB removed (what whisper may hear as words). The
echo path: 150 ms behind the device's playback, 9 dB down, -55 dBFS noise; the microphone
reaches the gateway 30 ms after capture (uplink jitter alone does no harm: the reference is
consumed at the microphone's pace).
Pass rule: `kept_playing` at 100 ms of jitter within 3 dB of no jitter."""

from __future__ import annotations

from typing import Any

import numpy as np
from _common import emit, parser

from tests.support.speech import speak
from voice_gateway.echo.apm import ApmCanceller

RATE, FRAME = 16000, 320
WORDS = ("one", "two", "three", "four", "five", "six")


def run(sents: list[np.ndarray], jitter_s: float, kept: bool, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    gap_s, down_s, up_s, path_s, gain = 0.2, 0.03, 0.03, 0.15, 0.35
    sends, t = [], 0.0
    for pcm in sents:
        sends.append(t)
        t += len(pcm) / RATE + gap_s
    mic = np.zeros(int((t + 1.0) * RATE))
    end = 0.0
    for i, (sent, pcm) in enumerate(zip(sends, sents, strict=True)):
        arrives = sent + down_s + rng.uniform(0, jitter_s)
        # kept playing: silence fills the gap, so only the first arrival sets the timeline
        start = end + gap_s if kept and i else max(arrives, end)
        at = int((start + path_s) * RATE)
        mic[at : at + len(pcm)] += pcm * gain
        end = start + len(pcm) / RATE
    mic += rng.normal(0, 32768 * 10 ** (-55 / 20), len(mic))
    clock = [0.0]
    c = ApmCanceller(clock=lambda: clock[0])
    events = [(s, 0, i) for i, s in enumerate(sends)]
    events += [((k + 1) * 0.02 + up_s, 1, k) for k in range(len(mic) // FRAME)]
    loud_in = loud_out = 0.0
    shallow = loud = 0
    for when, kind, k in sorted(events):
        clock[0] = when
        if kind == 0:
            c.far(sents[k].tobytes())
            continue
        frame = np.clip(mic[k * FRAME : (k + 1) * FRAME], -32768, 32767).astype("<i2")
        out = np.frombuffer(c.near(frame.tobytes()), "<i2").astype(np.float64)
        x = frame.astype(np.float64)
        e_in, e_out = float(x @ x), float(out @ out)
        if k * 0.02 > 1.0 and e_in > 1e8:  # the echo's loud frames (about -36 dBFS and up)
            loud, loud_in, loud_out = loud + 1, loud_in + e_in, loud_out + e_out
            shallow += 10 * np.log10(e_in / (e_out + 1.0)) < 10
    return 10 * np.log10(loud_in / max(loud_out, 1.0)), shallow / max(loud, 1)


def main() -> None:
    parser(__doc__ or "").parse_args()
    sents = [speak(f"Here is sentence number {w} of a long answer about tea.") for w in WORDS]
    out: dict[str, Any] = {}
    for mode in ("restarts", "kept_playing"):
        for jitter_ms in (0, 20, 50, 100, 200):
            runs = [run(sents, jitter_ms / 1000, mode == "kept_playing", s) for s in range(3)]
            out.setdefault(mode, {})[f"{jitter_ms}ms"] = {
                "erle_db": round(float(np.median([r[0] for r in runs])), 1),
                "shallow_frames": round(float(np.median([r[1] for r in runs])), 3),
            }
    kept = out["kept_playing"]
    out["passed"] = kept["100ms"]["erle_db"] >= kept["0ms"]["erle_db"] - 3.0
    emit("echo_restarts", out)


if __name__ == "__main__":
    main()
