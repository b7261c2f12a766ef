"""What one whisper decode costs in CPU, with numpy's BLAS pool at the library's default (one
thread per core, the baseline) and at one thread (`VG_BLAS_THREADS=1`, the gateway's default;
voice_gateway/native_threads.py), in the same run.

Each setting runs in a fresh process: whisper tiny.en (int8, VG_STT_THREADS threads) decodes the
13 real recordings of tests/support/real_speech.py (plus the 140 ms of silence a speculative
decode pads), `--rounds` times, as the gateway's decode pool does:
- `serial`: one decode at a time; per decode the wall time, the process's CPU during it, and
  the CPU spent in the 200 ms after it returned (a pool's idle threads spinning);
- `pairs`: two decodes at once from two threads (the pool's two workers under load): wall time
  per decode and process CPU per decode, idle time after each pair included.
Pass rule (`passed`): with one BLAS thread the CPU per decode (spin included) is lower and the
serial wall p50 no more than 10 % higher than with the default pool.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np
from _common import emit, parser, ratio, summary

IDLE_S = 0.2


def _child(blas: int, threads: int, rounds: int) -> dict[str, Any]:
    from tests.support.real_speech import clips
    from voice_gateway.native_threads import blas_threads, limit_blas
    from voice_gateway.stt.whisper import load_model, transcribe

    limit_blas(blas)
    load_model(threads)
    pad = np.zeros(16000 * 140 // 1000, np.int16)
    audio = [np.concatenate([c.pcm, pad]).astype(np.float32) / 32768 for c in clips()]
    transcribe(audio[0], threads, retry_looped=False)  # warm
    wall, busy, spin = [], [], []
    for _ in range(rounds):
        for a in audio:
            c0, t0 = time.process_time(), time.perf_counter()
            transcribe(a, threads, retry_looped=False)
            wall.append((time.perf_counter() - t0) * 1000)
            c1 = time.process_time()
            time.sleep(IDLE_S)
            busy.append((c1 - c0) * 1000)
            spin.append((time.process_time() - c1) * 1000)
    pair_wall: list[float] = []
    c0 = time.process_time()
    for _ in range(rounds):
        for i in range(0, len(audio) - 1, 2):

            def one(a: np.ndarray) -> None:
                t = time.perf_counter()
                transcribe(a, threads, retry_looped=False)
                pair_wall.append((time.perf_counter() - t) * 1000)

            ts = [threading.Thread(target=one, args=(a,)) for a in audio[i : i + 2]]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            time.sleep(IDLE_S)
    pair_cpu = (time.process_time() - c0) * 1000 / max(1, len(pair_wall))
    total = [b + s for b, s in zip(busy, spin, strict=True)]
    return {
        "blas_threads": blas_threads(),
        "serial": {
            "wall": summary(wall),
            "cpu_in_decode_p50_ms": round(statistics.median(busy), 1),
            "cpu_after_decode_p50_ms": round(statistics.median(spin), 1),
            "cpu_per_decode_p50_ms": round(statistics.median(total), 1),
        },
        "pairs": {"wall": summary(pair_wall), "cpu_per_decode_ms": round(pair_cpu, 1)},
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="VG_STT_THREADS")
    p.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    args = p.parse_args()
    rounds = 1 if args.quick else args.rounds
    if args.child >= 0:
        print(json.dumps(_child(args.child, args.threads, rounds)))
        return
    out: dict[str, Any] = {"rounds": rounds, "stt_threads": args.threads}
    for name, blas in (("blas_default", 0), ("blas_one", 1)):
        cmd = [sys.executable, __file__, "--child", str(blas), "--threads", str(args.threads)]
        cmd += ["--rounds", str(rounds)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
    d, o = out["blas_default"], out["blas_one"]
    out["cpu_per_decode_ratio"] = ratio(
        o["serial"]["cpu_per_decode_p50_ms"], d["serial"]["cpu_per_decode_p50_ms"]
    )
    out["pairs_cpu_ratio"] = ratio(o["pairs"]["cpu_per_decode_ms"], d["pairs"]["cpu_per_decode_ms"])
    out["wall_p50_ratio"] = ratio(o["serial"]["wall"]["p50_ms"], d["serial"]["wall"]["p50_ms"])
    out["pairs_wall_p50_ratio"] = ratio(o["pairs"]["wall"]["p50_ms"], d["pairs"]["wall"]["p50_ms"])
    out["passed"] = bool(
        out["cpu_per_decode_ratio"] is not None
        and out["cpu_per_decode_ratio"] < 1.0
        and (out["wall_p50_ratio"] or 0) <= 1.1
    )
    emit("stt_cpu", out)


if __name__ == "__main__":
    main()
