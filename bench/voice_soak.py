"""Soak: 200 concurrent fake-provider calls for 5 minutes (after 2.5 minutes' warm-up) on one
gateway process.

The gateway runs in its own process (uvicorn + uvloop, as `voice-gateway serve`) with instant
STT/LLM/TTS (subclasses of our provider base classes), the real webrtcvad on every 20 ms frame,
the real agent loop and SQLite. Load generators in two other processes keep `--calls` callers
busy for `--seconds`: each caller streams a speech-then-silence cycle in real time (one turn per
cycle, a short reply heard), hangs up after a random 20-60 s and dials again at once, so
sessions churn (hundreds are opened and closed) the way a real deployment's do: a per-call leak
shows as RSS growth, not only a per-frame one.

Reported:
- rss: the gateway's resident memory sampled every 2 s; growth = end vs. the end of the warm-up
  (the first `--warmup` seconds, 2.5 min: caches, SQLite pages and the conversation history
  fill); also the least-squares slope over the measured part (5 min) in MB/min. Target: growth
  < 5 %. Each agent's in-context history is cached in the gateway up to its context window
  (the server default is 6,000 tokens, ~500 of these short turns, far more than a soak
  reaches: a call's agent takes a turn every ~7 s), so the callers' agents get the smallest
  window the API allows, 500 tokens (`--context-window`): their histories reach the steady
  state (summarized and evicted every ~10 turns) within the warm-up, and what still grows
  after it is a leak, not a cache filling. The timing instrumentation keeps a fixed-size
  uniform sample (bench/_frames.py Reservoir), so it does not grow either.
  `grown_by_mapping`: which mappings grew (/proc/pid/smaps): malloc's arenas show as
  "[anon]"/"[heap]", SQLite's shared WAL index as "soak.db-shm";
- frame handling in the gateway (InputPath.audio and .now per 20 ms frame) and the client-observed
  latency (voiced frame sent -> its `speech.started` received): p50/p99;
- errors: `error` events, calls that closed with anything but 1000, calls that failed to
  connect; sessions opened; turns answered. Target: zero errors.
Baseline in the same run: the warm-up window's frame handling p99 (the same load, minutes
earlier): the ratio shows whether handling degrades as the process ages.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import random
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from _common import emit, parser, ratio, summary
from _concurrency_load import cycle_pattern
from _voice import load, start_gateway

CYCLE_S = 6.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_by_mapping(pid: int) -> dict[str, float]:
    """Resident MB per mapping name (/proc/pid/smaps): "[anon]" for malloc's arenas and other
    unnamed memory, "[heap]", a shared library, the SQLite -shm file, ..."""
    out: dict[str, float] = {}
    name = "[anon]"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and not head[0].endswith(":"):
            name = head[5] if len(head) > 5 else "[anon]"
        elif head and head[0] == "Rss:":
            out[name] = out.get(name, 0.0) + int(head[1]) / 1024
    return out


def grown_mappings(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The mappings whose resident size grew most (MB)."""
    grown = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)[:6]
    return {Path(k).name or k: round(mb, 2) for mb, k in grown if mb > 0.05}


async def _caller(
    url: str, end_at: float, rnd: random.Random, pattern: list[bytes], out: dict[str, Any]
) -> None:
    """One caller: call, talk for 20-60 s, hang up, call again, until `end_at`."""
    import websockets

    n = len(pattern)
    while time.monotonic() < end_at - 5:
        hang_up_at = min(end_at, time.monotonic() + rnd.uniform(20, 60))
        sent_at: list[float] = []
        try:
            ws = await websockets.connect(url, compression=None, max_size=2**22)
        except Exception as exc:
            out["connect_failures"].append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(1)
            continue
        out["sessions"] += 1
        reader = asyncio.create_task(_read(ws, sent_at, out))
        await ws.send(json.dumps({"type": "session.start"}))
        offset, k, t0 = rnd.randrange(n), 0, time.monotonic()
        while time.monotonic() < hang_up_at:
            delay = t0 + k * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at.append(time.monotonic())
            try:
                await ws.send(pattern[(offset + k) % n])
            except Exception as exc:
                out["errors"].append(f"send: {type(exc).__name__}")
                break
            k += 1
        out["frames"] += k
        try:
            await ws.send(json.dumps({"type": "session.end"}))
        except Exception:
            pass
        await asyncio.wait([reader], timeout=20)
        if ws.close_code != 1000:
            out["bad_closes"].append(ws.close_code)
        await ws.close()


async def _read(ws: Any, sent_at: list[float], out: dict[str, Any]) -> None:
    try:
        async for msg in ws:
            if isinstance(msg, bytes):
                out["audio_bytes"] += len(msg)
                continue
            event = json.loads(msg)
            kind = event["type"]
            if kind == "speech.started":
                idx = event["at_ms"] // 20
                if idx < len(sent_at):
                    out["latencies"].append((time.monotonic() - sent_at[idx]) * 1000)
            elif kind == "response.done":
                out["turns"] += 1
            elif kind == "error":
                out["errors"].append(event.get("code", "?"))
    except Exception as exc:
        out["errors"].append(f"read: {type(exc).__name__}")


def _loader(conn: Connection, urls: list[str], seconds: float, seed: int) -> None:
    import uvloop

    pattern = cycle_pattern(CYCLE_S).frames
    out: dict[str, Any] = {
        "sessions": 0,
        "frames": 0,
        "turns": 0,
        "audio_bytes": 0,
        "latencies": [],
        "errors": [],
        "bad_closes": [],
        "connect_failures": [],
    }

    async def main() -> None:
        end_at = time.monotonic() + seconds
        rnd = random.Random(seed)
        tasks = []
        for url in urls:  # dial in over ~2 s, not all in the same millisecond
            tasks.append(
                asyncio.create_task(_caller(url, end_at, random.Random(rnd.random()), pattern, out))
            )
            await asyncio.sleep(2.0 / len(urls))
        await asyncio.gather(*tasks)

    uvloop.run(main())
    conn.send(out)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--seconds", type=float, default=450.0, help="the whole run, warm-up included")
    p.add_argument("--warmup", type=float, default=150.0)
    p.add_argument(
        "--context-window",
        type=int,
        default=500,
        help="the agents' context window in tokens (0: the server default, 6000)",
    )
    p.add_argument("--loaders", type=int, default=2)
    args = p.parse_args()
    if args.quick:
        args.calls, args.seconds, args.warmup = 50, 80.0, 30.0
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'soak.db'}",
            llm={"reply": "Sure thing."},
            stt="instant",
            tts="instant",
            sleeptime_every_turns=5,
            idle_timeout_s=600.0,
            log_name="voice_soak",
        )
        try:
            window = {"context_window_limit": args.context_window} if args.context_window else {}
            agents = [gw.agent(name=f"soak-{i}", **window) for i in range(args.calls)]
            urls = [f"{gw.ws_url}/v1/agents/{a}/voice" for a in agents]
            pipes, procs = [], []
            for j in range(args.loaders):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_loader, args=(child, urls[j :: args.loaders], args.seconds, j)
                )
                proc.start()
                pipes.append(parent)
                procs.append(proc)
            t0 = time.monotonic()
            samples: list[tuple[float, float]] = []
            maps_warm: dict[str, float] = {}
            warm: dict[str, Any] | None = None
            at_warm: dict[str, Any] = {}
            baseline_at = args.warmup
            while any(not pp.poll() for pp in pipes):
                samples.append((time.monotonic() - t0, rss_mb(gw.proc.pid)))
                if warm is None and samples[-1][0] >= args.warmup:
                    at_warm = gw.stats()
                    warm = at_warm["frame_handling"]
                    gw.reset()
                    # the snapshot itself allocates (and CPython keeps the arenas): the
                    # baseline is the RSS after it, not before
                    baseline_at = time.monotonic() - t0
                    samples.append((baseline_at, rss_mb(gw.proc.pid)))
                    maps_warm = rss_by_mapping(gw.proc.pid)
                time.sleep(2.0)
            results = [pp.recv() for pp in pipes]
            for proc in procs:
                proc.join(30)
            server = gw.stats()
            maps_end = rss_by_mapping(gw.proc.pid)
        finally:
            gw.stop()
    measured = [(t, m) for t, m in samples if t >= baseline_at]
    rss_warm, rss_end = measured[0][1], measured[-1][1]
    ts, ms = np.array([t for t, _ in measured]), np.array([m for _, m in measured])
    slope = float(np.polyfit(ts / 60, ms, 1)[0]) if len(measured) > 2 else 0.0
    growth = (rss_end - rss_warm) / rss_warm * 100
    errors = [e for r in results for e in r["errors"]]
    bad = [c for r in results for c in r["bad_closes"]]
    failures = [f for r in results for f in r["connect_failures"]]
    handling = server["frame_handling"]
    before, after = at_warm["gc"]["by_type"], server["gc"]["by_type"]
    grown = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)[:8]
    emit(
        "voice_soak",
        {
            "quick": args.quick,
            "calls": args.calls,
            "seconds": args.seconds,
            "warmup_s": args.warmup,
            "measured_s": args.seconds - args.warmup,
            "agent_context_window_tokens": args.context_window or 6000,
            "sessions_opened": sum(r["sessions"] for r in results),
            "turns_answered": sum(r["turns"] for r in results),
            "frames_sent": sum(r["frames"] for r in results),
            "rss_mb": {
                "after_warmup": round(rss_warm, 1),
                "end": round(rss_end, 1),
                "max": round(max(ms), 1),
                "growth_pct": round(growth, 2),
                "slope_mb_per_min": round(slope, 3),
                "grown_by_mapping": grown_mappings(maps_warm, maps_end),
                "samples": [
                    (round(t), round(m, 1)) for t, m in samples[:: max(1, len(samples) // 30)]
                ],
            },
            "server_frame_handling": handling,
            "baseline_warmup_frame_handling": warm,
            "p99_ratio_vs_warmup": ratio(handling.get("p99_ms", 0), (warm or {}).get("p99_ms", 0)),
            "server_loop_lag": server["loop_lag"],
            "objects_grown_after_warmup": {k: n for n, k in grown if n > 0},
            "tracemalloc_growth": server.get("tracemalloc", []),
            "objects_tracked": {
                "after_warmup": at_warm["gc"]["tracked_objects"],
                "end": server["gc"]["tracked_objects"],
            },
            "client_frame_latency": summary([x for r in results for x in r["latencies"]]),
            "errors": {
                "count": len(errors) + len(bad) + len(failures),
                "events": errors[:10],
                "bad_close_codes": bad[:10],
                "connect_failures": failures[:5],
            },
            "target": {
                "rss_growth_pct_lt": 5,
                "met": growth < 5 and not (errors or bad or failures),
            },
            **load(),
        },
    )


if __name__ == "__main__":
    main()
