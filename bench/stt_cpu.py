"""What whisper decodes cost in CPU and time with the gateway's thread settings, against the
libraries' defaults, in the same run (voice_gateway/native_threads.py, stt/whisper.py):
- `before`: numpy's BLAS pool at the library's default (one thread per core), CTranslate2 with
  one worker on 2 threads (the baseline);
- `blas_one`: the same with one BLAS thread (`VG_BLAS_THREADS=1`);
- `defaults`: one BLAS thread and two CTranslate2 workers on one thread each
  (`VG_STT_WORKERS=2`, `VG_STT_THREADS=1`): the gateway's defaults.

Each runs in a fresh process: whisper tiny.en (int8) decodes the 13 real recordings of
tests/support/real_speech.py (plus the 140 ms of silence a speculative decode pads),
`--rounds` times:
- `serial`: one decode at a time; per decode the wall time, the process's CPU during it, and
  the CPU spent in the 200 ms after it returned (a pool's idle threads spinning);
- `pairs`: two decodes at once from two threads (the gateway's decode pool under load): wall
  time per decode, the time for all of them, and process CPU per decode.
Pass rule (`passed`): with the defaults the CPU per decode is lower than before (serial and
pairs), the pairs take less time in all, and the serial wall p50 is no more than 10 % higher.
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


def _child(blas: int, threads: int, workers: int, rounds: int) -> dict[str, Any]:
    from tests.support.real_speech import clips
    from voice_gateway.native_threads import blas_threads, limit_blas
    from voice_gateway.stt.whisper import load_model, transcribe

    limit_blas(blas)
    load_model(threads, workers)
    pad = np.zeros(16000 * 140 // 1000, np.int16)
    audio = [np.concatenate([c.pcm, pad]).astype(np.float32) / 32768 for c in clips()]
    transcribe(audio[0], threads, workers=workers, retry_looped=False)  # warm
    wall, busy, spin = [], [], []
    for _ in range(rounds):
        for a in audio:
            c0, t0 = time.process_time(), time.perf_counter()
            transcribe(a, threads, workers=workers, retry_looped=False)
            wall.append((time.perf_counter() - t0) * 1000)
            c1 = time.process_time()
            time.sleep(IDLE_S)
            busy.append((c1 - c0) * 1000)
            spin.append((time.process_time() - c1) * 1000)
    pair_wall: list[float] = []

    def one(a: np.ndarray) -> None:
        t = time.perf_counter()
        transcribe(a, threads, workers=workers, retry_looped=False)
        pair_wall.append((time.perf_counter() - t) * 1000)

    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        for i in range(0, len(audio) - 1, 2):
            ts = [threading.Thread(target=one, args=(a,)) for a in audio[i : i + 2]]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            time.sleep(IDLE_S)
    pair_cpu = (time.process_time() - c0) * 1000 / max(1, len(pair_wall))
    pair_s = time.perf_counter() - t0 - IDLE_S * rounds * (len(audio) // 2)
    total = [b + s for b, s in zip(busy, spin, strict=True)]
    return {
        "blas_threads": blas_threads(),
        "serial": {
            "wall": summary(wall),
            "cpu_in_decode_p50_ms": round(statistics.median(busy), 1),
            "cpu_after_decode_p50_ms": round(statistics.median(spin), 1),
            "cpu_per_decode_p50_ms": round(statistics.median(total), 1),
        },
        "pairs": {
            "wall": summary(pair_wall),
            "all_decodes_s": round(pair_s, 3),
            "cpu_per_decode_ms": round(pair_cpu, 1),
        },
    }


CONFIGS = {"before": (0, 2, 1), "blas_one": (1, 2, 1), "defaults": (1, 1, 2)}


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--child", type=str, default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    rounds = 1 if args.quick else args.rounds
    if args.child:
        blas, threads, workers = (int(x) for x in args.child.split(","))
        print(json.dumps(_child(blas, threads, workers, rounds)))
        return
    out: dict[str, Any] = {"rounds": rounds, "configs": {}}
    for name, (blas, threads, workers) in CONFIGS.items():
        cmd = [sys.executable, __file__, "--child", f"{blas},{threads},{workers}"]
        done = subprocess.run([*cmd, "--rounds", str(rounds)], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name}: {done.stderr[-2000:]}")
        run = json.loads(done.stdout.strip().splitlines()[-1])
        out["configs"][name] = {"blas": blas, "stt_threads": threads, "stt_workers": workers, **run}
    c, base = out["configs"], out["configs"]["before"]
    for name in ("blas_one", "defaults"):
        s, p_ = c[name]["serial"], c[name]["pairs"]
        out[f"{name}_vs_before"] = {
            "cpu_per_decode": ratio(
                s["cpu_per_decode_p50_ms"], base["serial"]["cpu_per_decode_p50_ms"]
            ),
            "serial_wall_p50": ratio(s["wall"]["p50_ms"], base["serial"]["wall"]["p50_ms"]),
            "pairs_cpu_per_decode": ratio(
                p_["cpu_per_decode_ms"], base["pairs"]["cpu_per_decode_ms"]
            ),
            "pairs_wall_p50": ratio(p_["wall"]["p50_ms"], base["pairs"]["wall"]["p50_ms"]),
            "pairs_all_decodes": ratio(p_["all_decodes_s"], base["pairs"]["all_decodes_s"]),
        }
    d = out["defaults_vs_before"]
    out["passed"] = bool(
        d["cpu_per_decode"] < 1.0
        and d["pairs_cpu_per_decode"] < 1.0
        and d["pairs_all_decodes"] < 1.0
        and d["serial_wall_p50"] <= 1.1
    )
    emit("stt_cpu", out)


if __name__ == "__main__":
    main()
