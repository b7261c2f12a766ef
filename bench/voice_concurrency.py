"""(c) Concurrent real-time calls one gateway process holds on this machine.

The gateway runs in its own process (uvicorn + uvloop + httptools, as `voice-gateway serve`)
with instant STT/LLM/TTS (subclasses of our provider base classes) and the real webrtcvad on
every 20 ms frame; turns go through the real agent loop and SQLite. Load generators run in
separate processes (bench/_wsload.py: a light RFC 6455 client, real masked frames on real
sockets at real-time pace; --client websockets uses the websockets library's client instead):
each call streams an 8 s cycle (espeak-ng speech, then silence) as 20 ms PCM16 frames, at its
own phase, so it takes one turn per cycle and hears a short reply. (--cycle sets the cycle;
500 calls at 8 s are ~62 agent turns per second, each with SQLite writes.)

Each level runs on each of the gateway's WebSocket protocols in --ws (default: ours, what
`voice-gateway serve` runs, then uvicorn's websockets-sansio, the baseline), in turn.

Per level (number of calls) it reports:
- client-observed frame latency: a voiced frame sent -> its `speech.started` event received
  (the socket both ways + queueing + handling in the gateway); p50/p99;
- server-side: the time the session spends on each frame (VoiceSession._audio: resampling,
  VAD, turn detection, STT push, events) and the event loop's lag (a 10 ms timer's lateness:
  how long a frame that just arrived waits before it is read); the gateway's main-thread CPU
  per frame over the streaming window;
- dropped frames: frames sent but never handled by a session, and calls that failed;
- the load generators' own CPU per frame and how late they were against their schedule.
A level passes when the client-observed p99 < 20 ms, no frame was dropped, every call ran to
the end and the load generators kept to their schedule (p99 lateness < 20 ms: else the gateway
was not offered the load); `fail_reasons` says why not. The result is the largest passing
level per protocol. Target: >= 500 calls.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from _common import emit, parser, summary
from _voice import load, speech_clip, start_gateway
from _wsload import OP_BINARY, LoadCall, connect, frame_header

CYCLE_S = 8.0  # one user turn per 8 s per call: ~2 s of speech, a reply, a pause
FRAME = 640  # 20 ms at 16 kHz


def cycle_frames(cycle_s: float = CYCLE_S) -> list[bytes]:
    from tests.support.speech import frames

    speech = speech_clip("Hello there, how are you doing today?")
    pad = int(cycle_s * 16000) - len(speech)
    return frames(np.concatenate([speech, np.zeros(pad, dtype=np.int16)]), 16000)


class BenchCall(LoadCall):
    """A call of the benchmark on the light client (bench/_wsload.py): what it sent when, and
    what it heard back."""

    def __init__(self, host: str, path: str, offset: int) -> None:
        super().__init__(host, path)
        self.offset = offset
        self.sent_at: list[float] = []
        self.session_id = ""
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.latencies: list[float] = []
        self.replies = 0

    def on_event(self, at: float, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "speech.started":
            idx = event["at_ms"] // 20  # the input frame whose handling emitted it
            if idx < len(self.sent_at):
                self.latencies.append((at - self.sent_at[idx]) * 1000)
        elif kind == "response.done":
            self.replies += 1
        elif kind == "session.started":
            self.session_id = event.get("session_id", "")
            if not self.started.done():
                self.started.set_result(None)
        elif kind == "error":
            self.errors.append(event.get("code", "?"))


class LibCall(BenchCall):
    """The same call on the `websockets` library's asyncio client (--client websockets): a
    task per call reads, each frame is an awaited send. Heavier; a cross-check of the light
    client."""

    def __init__(self, ws: Any, offset: int) -> None:
        super().__init__("", "", offset)
        self.ws = ws

    async def read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    self.audio_bytes += len(msg)
                else:
                    self.on_event(time.monotonic(), json.loads(msg))
        except ConnectionClosed as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        self.close_code = self.ws.close_code
        if not self.closed.done():
            self.closed.set_result(None)


async def _open(url: str, offset: int, client: str) -> BenchCall:
    if client == "websockets":
        import websockets

        ws = await websockets.connect(url, compression=None, max_size=2**22)
        call: BenchCall = LibCall(ws, offset)
        call.reader = asyncio.create_task(call.read())  # type: ignore[attr-defined]
        await ws.send(json.dumps({"type": "session.start"}))
    else:
        call = await connect(BenchCall, url, offset)
        call.send_json({"type": "session.start"})
    await asyncio.wait_for(call.started, 30)
    return call


async def _stream(calls: list[BenchCall], ticks: int, groups: int, cycle_s: float) -> list[float]:
    """Each call's frames in real time, the calls in `groups` phases 20/groups ms apart; each
    frame is written straight to its socket (masked with a fresh key). Returns each tick's
    lateness (ms): how far the generator itself fell behind the schedule."""
    pattern = cycle_frames(cycle_s)
    n = len(pattern)
    header = frame_header(OP_BINARY, FRAME)
    lib = [c for c in calls if isinstance(c, LibCall)]
    by_group = [calls[g::groups] for g in range(groups)]
    late: list[float] = []
    now = time.monotonic
    t0 = now()
    for k in range(ticks):
        for g, members in enumerate(by_group):
            delay = t0 + k * 0.02 + g * 0.02 / groups - now()
            if delay > 0:
                await asyncio.sleep(delay)
            late.append(max(0.0, -delay) * 1000)
            for c in members:
                c.sent_at.append(now())
                if lib:
                    await c.ws.send(pattern[(c.offset + k) % n])  # type: ignore[attr-defined]
                else:
                    c.send(pattern[(c.offset + k) % n], header)
    return late


async def _load(
    urls: list[str],
    offsets: list[int],
    ticks: int,
    start_at: float,
    cycle_s: float,
    client: str,
) -> dict[str, Any]:
    calls = [await _open(u, o, client) for u, o in zip(urls, offsets, strict=True)]
    # a wall-clock start shared by all loaders, then monotonic pacing
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()
    late = await _stream(calls, ticks, groups=10, cycle_s=cycle_s)
    cpu_s = time.process_time() - cpu0
    # calls end at their own time, spread over a second (not all in the same millisecond)
    for c in calls:
        if isinstance(c, LibCall):
            await c.ws.send(json.dumps({"type": "session.end"}))
        else:
            c.send_json({"type": "session.end"})
        await asyncio.sleep(1.0 / max(1, len(calls)))
    await asyncio.wait([asyncio.ensure_future(c.closed) for c in calls], timeout=60)
    return {
        "calls": [
            {
                "session_id": c.session_id,
                "sent": len(c.sent_at),
                "latencies": c.latencies,
                "replies": c.replies,
                "audio_bytes": c.audio_bytes,
                "errors": c.errors,
                "close_code": c.close_code,
            }
            for c in calls
        ],
        "cpu_s": cpu_s,
        "late": late,
    }


def _loader(
    conn: Connection,
    urls: list[str],
    offsets: list[int],
    ticks: int,
    start_at: float,
    cycle_s: float,
    client: str,
) -> None:
    import gc

    import uvloop

    gc.disable()  # the load generator must not pause to collect (a short-lived process)
    try:
        result = uvloop.run(_load(urls, offsets, ticks, start_at, cycle_s, client))
    except Exception as exc:
        result = {"failed": f"{type(exc).__name__}: {exc}"}
    conn.send(result)


def settle(gws: list[Any], max_s: float = 180.0) -> float:
    """Wait until every gateway's main thread is idle (< 5 % of a core over a second): the
    calls of the last level end with work (their transcripts, call-end sleeptime runs) that
    must not run during the next level, on this gateway or on the other protocol's."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        before = [gw.cpu()["main_thread_cpu_s"] for gw in gws]
        time.sleep(1.0)
        used = [gw.cpu()["main_thread_cpu_s"] - b for gw, b in zip(gws, before, strict=True)]
        if max(used) < 0.05:
            break
    return round(time.monotonic() - t0, 1)


def run_level(
    gw: Any,
    agents: list[str],
    n: int,
    seconds: float,
    loaders: int,
    cycle_s: float = CYCLE_S,
    client: str = "raw",
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    rnd = random.Random(n)
    n_frames = int(cycle_s * 50)
    urls = [f"{gw.ws_url}/v1/agents/{agents[i]}/voice" for i in range(n)]
    offsets = [rnd.randrange(n_frames) for _ in range(n)]
    ticks = int(seconds * 50)
    start_at = time.time() + 3.0 + n * 0.01  # time to connect every call first
    pipes, procs = [], []
    for j in range(loaders):
        parent, child = ctx.Pipe()
        p = ctx.Process(
            target=_loader,
            args=(child, urls[j::loaders], offsets[j::loaders], ticks, start_at, cycle_s, client),
        )
        p.start()
        pipes.append(parent)
        procs.append(p)
    time.sleep(max(0.0, start_at - time.time()))
    load_before = os.getloadavg()[0]
    gw.reset()  # measure from the moment every call streams
    time.sleep(seconds)
    streaming_cpu = gw.cpu()  # the calls' real-time part, not their set-up or ending
    results = [p.recv() for p in pipes]
    for p in procs:
        p.join(30)
    server = gw.stats()
    server["cpu"] = streaming_cpu
    return _verdict(n, server, results, (load_before, os.getloadavg()[0]))


def _verdict(
    n: int, server: dict[str, Any], results: list[dict[str, Any]], load1: tuple[float, float]
) -> dict[str, Any]:
    failed = [r["failed"] for r in results if "failed" in r]
    calls = [c for r in results if "calls" in r for c in r["calls"]]
    lat = summary([x for c in calls for x in c["latencies"]])
    late = summary([x for r in results for x in r.get("late", [])])
    sent = sum(c["sent"] for c in calls)
    counted = server["frames"]
    dropped = (
        sum(max(0, c["sent"] - counted.get(c["session_id"], 0)) for c in calls) if counted else None
    )
    bad_calls = [c for c in calls if c["errors"] or c["close_code"] != 1000]
    reasons = [f"load generator failed: {f}" for f in failed]
    if len(calls) != n or bad_calls:
        reasons.append(f"{len(bad_calls) + n - len(calls)} calls failed")
    if dropped:
        reasons.append(f"{dropped} frames dropped")
    if lat.get("p99_ms", float("inf")) >= 20:
        reasons.append(f"client frame p99 {lat.get('p99_ms')} ms >= 20 ms")
    if late.get("p99_ms", float("inf")) >= 20:
        # the gateway was not offered real-time load: never a pass, whatever else it shows
        reasons.append(f"load generator behind schedule: p99 {late.get('p99_ms')} ms")
    main_s = server["cpu"]["main_thread_cpu_s"]
    return {
        "calls": n,
        "passed": not reasons,
        "fail_reasons": reasons,
        "client_frame_latency": lat,
        "server_frame_handling": server["frame_handling"],
        "server_loop_lag": server["loop_lag"],
        "server_gc_pauses": server["gc_pauses"],
        "server_gc": server["gc"],
        "server_cpu": {
            **server["cpu"],
            "main_thread_us_per_frame": round(main_s / max(1, sent) * 1e6, 2),
        },
        "frames_sent": sent,
        "frames_dropped": dropped,
        "failed_calls": len(bad_calls) + (n - len(calls)),
        "call_errors": sorted({e for c in bad_calls for e in c["errors"]})[:5] + failed,
        "replies": sum(c["replies"] for c in calls),
        "loader_cpu_us_per_frame": round(
            sum(r.get("cpu_s", 0.0) for r in results) / max(1, sent) * 1e6, 2
        ),
        "loader_lateness": late,
        "loadavg_1m_start_end": [round(x, 2) for x in load1],
    }


def row(impl: str, client: str, level: dict[str, Any]) -> dict[str, Any]:
    """The level in one line: what the docs' table shows."""
    return {
        "ws": impl,
        "client": client,
        "calls": level["calls"],
        "passed": level["passed"],
        "client_p99_ms": level["client_frame_latency"].get("p99_ms"),
        "server_frame_p99_ms": level["server_frame_handling"].get("p99_ms"),
        "loop_lag_p99_ms": level["server_loop_lag"].get("p99_ms"),
        "dropped": level["frames_dropped"],
        "main_thread_cores": level["server_cpu"]["main_thread_cores"],
        "main_thread_us_per_frame": level["server_cpu"]["main_thread_us_per_frame"],
        "loader_cpu_us_per_frame": level["loader_cpu_us_per_frame"],
        "loader_late_p99_ms": level["loader_lateness"].get("p99_ms"),
        "loadavg_1m": level["loadavg_1m_start_end"],
        "fail_reasons": level["fail_reasons"],
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="", help="comma-separated call counts")
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--loaders", type=int, default=2)
    p.add_argument("--cycle", type=float, default=CYCLE_S, help="seconds per turn per call")
    p.add_argument(
        "--no-turns", action="store_true", help="STT hears nothing: the audio path alone"
    )
    p.add_argument(
        "--no-instrument",
        action="store_true",
        help="no per-frame timing in the server (CPU per frame only; frames not counted)",
    )
    p.add_argument(
        "--ws",
        default="fast,websockets-sansio",
        help="the gateway's WebSocket protocols, each level run on each in turn: fast (ours, "
        "what `voice-gateway serve` runs) and/or uvicorn's websockets-sansio (the baseline), "
        "websockets, wsproto",
    )
    p.add_argument(
        "--client",
        default="raw",
        choices=["raw", "websockets"],
        help="load generator: the light RFC 6455 client (bench/_wsload.py) or the websockets "
        "library's asyncio client",
    )
    args = p.parse_args()
    impls = [x for x in args.ws.split(",") if x]
    levels = [int(x) for x in args.levels.split(",") if x] or (
        [100, 300] if args.quick else [200, 300, 400, 500, 600, 700]
    )
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    name = "voice_concurrency_no_turns" if args.no_turns else "voice_concurrency"
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        gws = {
            impl: start_gateway(
                f"sqlite+aiosqlite:///{Path(tmp) / f'bench-{impl}.db'}",
                llm={"reply": "Sure thing."},
                stt="instant-mute" if args.no_turns else "instant",
                tts="instant",
                sleeptime_every_turns=10**6,
                idle_timeout_s=600.0,
                log_name=f"{name}.{impl}",
                instrument_frames=not args.no_instrument,
                ws_impl=impl,
            )
            for impl in impls
        }
        try:
            agents = {
                impl: [gw.agent(name=f"caller-{i}") for i in range(max(levels))]
                for impl, gw in gws.items()
            }
            done: set[str] = set()
            for n in levels:
                for impl, gw in gws.items():
                    if impl in done:
                        continue
                    settled_s = settle(list(gws.values()))
                    level = run_level(
                        gw, agents[impl], n, seconds, args.loaders, args.cycle, args.client
                    )
                    out.append({"ws": impl, "settled_s": settled_s, **level})
                    print(json.dumps(row(impl, args.client, level)), file=sys.stderr)
                    if not level["passed"] and n >= 400:
                        done.add(impl)  # its next levels would fail too
        finally:
            for gw in gws.values():
                gw.stop()
    best = {
        impl: max((lv["calls"] for lv in out if lv["ws"] == impl and lv["passed"]), default=0)
        for impl in impls
    }
    emit(
        name,
        {
            "quick": args.quick,
            "seconds_per_level": seconds,
            "turn_cycle_s": args.cycle,
            "loader_processes": args.loaders,
            "client": args.client,
            "agent_turns": not args.no_turns,
            "max_calls_passing": best,
            "target": {"calls": 500, "met": {impl: b >= 500 for impl, b in best.items()}},
            "table": [row(lv["ws"], args.client, lv) for lv in out],
            "levels": out,
            **load(),
        },
    )


if __name__ == "__main__":
    main()
