"""(c) Concurrent real-time calls one gateway process holds on this machine.

The gateway runs in its own process (uvicorn + uvloop + httptools, as `voice-gateway serve`)
with instant STT/LLM/TTS (subclasses of our provider base classes) and the real webrtcvad on
every 20 ms frame; turns go through the real agent loop and SQLite (`--database postgres`:
a fresh database on the local PostgreSQL server; `--redis` for the bus and turn locks;
`--sleeptime-workers N` adds N `voice-gateway sleeptime` processes per gateway: sleeptime in
workers, bench/_sleeptime_fleet.py). Load generators run in separate processes
(bench/_wsload.py: a light RFC 6455 client, real masked frames on real sockets at real-time
pace; --client websockets uses the websockets library's client instead):
each call streams a --cycle long pattern (espeak-ng speech, then silence) as 20 ms PCM16
frames, at its own phase, so it takes one turn per cycle and hears a short reply. (500 calls
at 8 s are ~62 agent turns per second, at 3 s ~167, each with SQLite writes.)

Each level runs on each of the gateway's WebSocket protocols in --ws (default: ours, what
`voice-gateway serve` runs, then uvicorn's websockets-sansio, the baseline) and in each agent
layout of --agents, one gateway process per (protocol, layout):
- per-call: every call has an agent of its own (no caller key);
- one: every call talks to ONE agent, each as its own caller (`session.start` names
  `"caller": "bench-caller-<i>"`, allowed in open loopback mode): its own conversation (context
  window, summary, turn lock) and its own `human` block on the shared agent.

Per level (number of calls) it reports:
- client-observed frame latency: a voiced frame sent -> its `speech.started` event received
  (the socket both ways + queueing + handling in the gateway); p50/p99;
- reply latency: the call's last frame with sound in it sent -> the first reply
  audio frame received, minus the VAD's endpoint delay (how long after that frame the
  gateway's own TurnDetector, fed the same pattern offline with webrtcvad, declares the turn
  over: a fixed audio-time figure, reported as `endpoint_delay_ms`); p50/p99, and the turns
  that got no reply audio within --reply-deadline of the endpoint (`turns_unanswered`). A
  turn counts when its whole utterance was streamed and its endpoint frame was sent at least
  the deadline before the stream ended;
- server-side: the time the session spends on each frame (pipeline/input.py InputPath: resampling,
  VAD, turn detection, STT push, events) and the event loop's lag (a 10 ms timer's lateness:
  how long a frame that just arrived waits before it is read); the gateway's main-thread CPU
  per frame over the streaming window;
- dropped frames: frames sent but never handled by a session, and calls that failed;
- the load generators' own CPU per frame and how late they were against their schedule.

Two pass rules per level (`rules` in the JSON; `passed` = both):
- frame rule: client frame p99 < 20 ms and no frame dropped;
- reply rule: reply latency p99 (minus the endpoint delay) < 100 ms and no turn
  without a reply in time;
and for both: every call ran to the end and the load generators kept to their schedule (p99
lateness < 20 ms: else the gateway was not offered the load); `fail_reasons` says why not. The
result is the largest level passing each rule per protocol and layout, and the one-agent /
per-call ratio of those (target: >= 0.9). Target: 500 calls.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from _capacity import overload_figures, start_workers
from _common import RESULTS, TempPostgresDatabases, emit, parser, postgres_admin_url, ratio
from _concurrency_consts import (
    CYCLE_S,
    ENDPOINT_MS,
    LAYOUTS,
    LONG_SPEECH,
    REPLY_DEADLINE_S,
    SHORT_SPEECH,
)
from _concurrency_load import Pattern, _loader, cycle_pattern
from _concurrency_rules import _verdict, behind, best_levels, row
from _sleeptime_fleet import SleeptimeFleet, measured
from _voice import load


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
    pattern: Pattern,
    client: str = "raw",
    callers: list[str | None] | None = None,
    deadline_s: float = REPLY_DEADLINE_S,
    endpoint_delay_ms: float | None = None,
) -> dict[str, Any]:
    """`agents[i]` is call i's agent; `callers[i]` its caller key (None: no caller);
    `endpoint_delay_ms`: taken off reply latency instead of the pattern's (offline) one."""
    ctx = mp.get_context("spawn")
    rnd = random.Random(n)
    n_frames = len(pattern.frames)
    urls = [f"{gw.ws_url}/v1/agents/{agents[i]}/voice" for i in range(n)]
    who = callers[:n] if callers else [None] * n
    offsets = [rnd.randrange(n_frames) for _ in range(n)]
    ticks = int(seconds * 50)
    start_at = time.time() + 3.0 + n * 0.01  # time to connect every call first
    pipes, procs = [], []
    for j in range(loaders):
        parent, child = ctx.Pipe()
        p = ctx.Process(
            target=_loader,
            args=(
                child,
                urls[j::loaders],
                who[j::loaders],
                offsets[j::loaders],
                ticks,
                start_at,
                pattern,
                client,
            ),
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
    refused = sum(len(r.get("refused", [])) for r in results)
    level = _verdict(
        n - refused,  # the rules judge the admitted calls
        server,
        results,
        (load_before, os.getloadavg()[0]),
        pattern.endpoint_delay_ms if endpoint_delay_ms is None else endpoint_delay_ms,
        deadline_s,
    )
    level["offered"] = overload_figures(results, n)
    level["loader_cores"] = round(sum(r.get("cpu_s", 0.0) for r in results) / seconds, 3)
    if "calls_per_worker" in server:
        level["calls_per_worker"] = server["calls_per_worker"]
        level["server_cpu"]["per_worker_main_thread_cores"] = streaming_cpu.get(
            "per_worker_main_thread_cores"
        )
    return level


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="", help="comma-separated call counts")
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--loaders", type=int, default=2)
    p.add_argument("--cycle", type=float, default=CYCLE_S, help="seconds per turn per call")
    p.add_argument(
        "--speech",
        default="",
        help=f"what each call says once per cycle (default: {LONG_SPEECH!r}; for cycles under "
        f"5 s {SHORT_SPEECH!r})",
    )
    p.add_argument(
        "--endpoint-ms",
        type=int,
        default=ENDPOINT_MS,
        help="the gateway's VG_ENDPOINT_SILENCE_MS: silence that ends a turn",
    )
    p.add_argument(
        "--reply-deadline",
        type=float,
        default=REPLY_DEADLINE_S,
        help="seconds after the endpoint within which a turn's first reply audio must come",
    )
    p.add_argument(
        "--agents",
        default="both",
        choices=["both", *LAYOUTS],
        help="per-call: an agent per call; one: every call on ONE agent, each its own caller; "
        "both: each level in both layouts (one gateway each), compared in the same run",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="passes over the levels (the layouts alternate going first); a layout's level "
        "counts as held when it passed in every pass",
    )
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
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="gateway processes sharing the port, as `serve --workers N` (N > 1: a private "
        "redis-server is started for the turn locks and the transcript bus)",
    )
    p.add_argument("--redis", action="store_true", help="Redis even with one worker")
    p.add_argument(
        "--sleeptime-workers",
        type=int,
        default=0,
        help="N `voice-gateway sleeptime` processes per gateway (implies --redis; the scripted "
        "model, a memory rewrite every 5 turns): sleeptime in workers, as deployed",
    )
    p.add_argument(
        "--database",
        default="sqlite",
        choices=["sqlite", "postgres"],
        help="the gateways' database: a SQLite file each, or a fresh database each on the "
        "PostgreSQL server of VG_BENCH_POSTGRES_URL / VG_TEST_POSTGRES_URL / 127.0.0.1:5432",
    )
    p.add_argument(
        "--overload",
        action="store_true",
        help="after the sweep: a fresh gateway whose call slots (VG_PROCESS_MAX_CALLS) are the "
        "largest level that held both rules (or --capacity), offered twice that many calls: "
        "the admitted must hold the rules, the rest be refused with 1013, none half-served",
    )
    p.add_argument("--capacity", type=int, default=0, help="--overload's capacity (0: measured)")
    args = p.parse_args()
    impls = [x for x in args.ws.split(",") if x]
    layouts = list(LAYOUTS) if args.agents == "both" else [args.agents]
    levels = [int(x) for x in args.levels.split(",") if x.isdigit()] or (
        []
        if args.levels == "none"
        else [100, 300]
        if args.quick
        else [200, 300, 400, 500, 600, 700]
    )
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    speech = args.speech or (SHORT_SPEECH if args.cycle < 5 else LONG_SPEECH)
    pattern = cycle_pattern(args.cycle, speech, args.endpoint_ms)
    name = "voice_concurrency_no_turns" if args.no_turns else "voice_concurrency"
    most = max([*levels, args.capacity]) * 2
    callers: list[str | None] = [f"bench-caller-{i}" for i in range(most)]
    out: list[dict[str, Any]] = []
    overloads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = None
        fleets: dict[int, SleeptimeFleet] = {}  # a gateway's sleeptime workers, by id(gateway)
        if args.workers > 1 or args.redis or args.sleeptime_workers:
            from tests.support.servers import free_port
            from tests.support.services import RedisServer

            redis = RedisServer(free_port(), tmp).start()

        pg = None
        if args.database == "postgres":
            admin = postgres_admin_url()
            if admin is None:
                sys.exit("--database postgres: no PostgreSQL server answers")
            pg = TempPostgresDatabases(admin)

        def launch(impl: str, layout: str, tag: str, **admission: Any) -> Any:
            k = len(impls) * LAYOUTS.index(layout) + impls.index(impl) + (8 if tag else 0)
            db = pg.new() if pg is not None else f"sqlite+aiosqlite:///{Path(tmp) / f'{k}.db'}"
            redis_url = f"redis://127.0.0.1:{redis.port}/{k}" if redis else None
            gw = start_workers(
                args.workers,
                db,
                llm={"reply": "Sure thing."},
                stt="instant-mute" if args.no_turns else "instant",
                tts="instant",
                sleeptime_every_turns=10**6,
                idle_timeout_s=600.0,
                endpoint_silence_ms=args.endpoint_ms,
                log_name=f"{name}.{impl}.{layout}{tag}",
                instrument_frames=not args.no_instrument,
                ws_impl=impl,
                redis_url=redis_url,
                # the sweep measures what the process holds: no admission control there
                **(admission or {"process_max_calls": 0, "admit_max_lag_ms": 0}),
            )
            if args.sleeptime_workers and redis_url:
                n, tag = args.sleeptime_workers, f"{name}.{k}"
                fleet = SleeptimeFleet(n, db, redis_url, RESULTS, tag)
                fleets[id(gw)] = fleet.start()
            return gw

        def make_agents(gw: Any, layout: str, n: int) -> list[str]:
            if layout == "one":
                return [gw.agent(name="shared")] * n
            return [gw.agent(name=f"caller-{i}") for i in range(n)]

        def level_of(gw: Any, layout: str, agent_ids: list[str], n: int) -> dict[str, Any]:
            """One level of `n` calls on `gw` (with its sleeptime workers' figures, if any)."""
            return measured(
                fleets.get(id(gw)),
                partial(
                    run_level,
                    gw,
                    agent_ids,
                    n,
                    seconds,
                    args.loaders,
                    pattern,
                    args.client,
                    callers if layout == "one" else None,
                    args.reply_deadline,
                ),
            )

        def overload(impl: str, layout: str, capacity: int) -> None:
            """A fresh gateway with `capacity` call slots, offered twice that many calls."""
            gw = launch(impl, layout, ".overload", process_max_calls=capacity)
            try:
                settle([gw])
                level = level_of(gw, layout, make_agents(gw, layout, 2 * capacity), 2 * capacity)
            finally:
                gw.stop()
            overloads.append({"ws": impl, "agents": layout, "capacity": capacity, **level})
            print(json.dumps(row(impl, layout, args.client, level)), file=sys.stderr)

        gws = {(impl, layout): launch(impl, layout, "") for impl in impls for layout in layouts}

        def run_pass(k: int, order: list[tuple[tuple[str, str], Any]]) -> None:
            done: set[tuple[str, str]] = set()
            for n in levels:
                for (impl, layout), gw in order:
                    if (impl, layout) in done:
                        continue
                    attempts = 0
                    while True:
                        attempts += 1
                        settled_s = settle(list(gws.values()))
                        level = level_of(gw, layout, agents[impl, layout], n)
                        # a load generator behind its schedule (the shared machine's other
                        # work) did not offer the load: run the level once more
                        if attempts == 2 or not behind(level):
                            break
                    out.append(
                        {
                            "ws": impl,
                            "agents": layout,
                            "settled_s": settled_s,
                            "attempts": attempts,
                            "pass": k,
                            **level,
                        }
                    )
                    print(json.dumps(row(impl, layout, args.client, level)), file=sys.stderr)
                    if not (level["rules"]["frame"] or level["rules"]["reply"] or behind(level)):
                        done.add((impl, layout))  # its next levels would fail too

        try:
            agents = {
                key: make_agents(gw, key[1], max(levels, default=0)) for key, gw in gws.items()
            }
            for k in range(args.repeat):
                # each pass sweeps the levels; the layouts take turns going first
                order = list(gws.items())
                run_pass(k, order if k % 2 == 0 else order[::-1])
        finally:
            for gw in gws.values():
                gw.stop()
        best = {
            impl: {layout: best_levels(out, impl, layout, args.repeat) for layout in layouts}
            for impl in impls
        }
        try:
            for impl in impls[:1]:  # admission is the app's, not the protocol's: ours
                for layout in layouts if args.overload else ():
                    capacity = args.capacity or best[impl][layout]["both"]
                    if capacity:
                        overload(impl, layout, capacity)
        finally:
            for fleet in fleets.values():
                fleet.stop()
            if redis is not None:
                redis.stop()
            if pg is not None:
                pg.drop_all()

    shared_vs_per_call = {
        impl: {
            rule: {
                "one_agent": best[impl]["one"][rule],
                "per_call": best[impl]["per-call"][rule],
                "ratio": ratio(best[impl]["one"][rule], best[impl]["per-call"][rule]),
                "met": best[impl]["one"][rule] >= 0.9 * best[impl]["per-call"][rule] > 0,
            }
            for rule in ("frame", "reply", "both")
        }
        for impl in impls
        if len(layouts) == 2
    }
    emit(
        name,
        {
            "quick": args.quick,
            "seconds_per_level": seconds,
            "levels_run": levels,
            "passes": args.repeat,
            "turn_cycle_s": args.cycle,
            "speech": speech,
            "endpoint_silence_ms": args.endpoint_ms,
            "endpoint_delay_ms": pattern.endpoint_delay_ms,
            "reply_deadline_s": args.reply_deadline,
            "loader_processes": args.loaders,
            "client": args.client,
            "agent_turns": not args.no_turns,
            "agent_layouts": layouts,
            "rules": {
                "frame": "client frame p99 < 20 ms, no frame dropped",
                "reply": "reply latency p99 (last speech frame sent -> first reply audio, minus "
                f"the endpoint delay) < 100 ms, no turn without reply audio within "
                f"{args.reply_deadline} s of its endpoint",
                "both": "every call ran to the end, load generators p99 lateness < 20 ms",
            },
            "max_calls_passing": best,
            "one_agent_vs_per_call": {
                "target": "one agent's largest level >= 0.9 x the per-call one",
                **shared_vs_per_call,
            },
            "target": {
                "calls": 500,
                "met": {
                    impl: {layout: b["both"] >= 500 for layout, b in per.items()}
                    for impl, per in best.items()
                },
            },
            "workers": args.workers,
            "redis": redis is not None,
            "database": args.database,
            "table": [row(lv["ws"], lv["agents"], args.client, lv) for lv in out],
            "overload": {
                "rule": "offered twice the capacity (the largest level holding both rules, or "
                "--capacity) to a gateway with that many call slots: the admitted calls hold "
                "both rules, every other call is refused with 1013 before any event, none is "
                "half-served",
                "table": [
                    {**row(lv["ws"], lv["agents"], args.client, lv), "capacity": lv["capacity"]}
                    for lv in overloads
                ],
                "held": [
                    lv["passed"]
                    and not lv["offered"]["half_served"]
                    and lv["offered"]["refused_1013"] + lv["calls"] == lv["offered"]["offered"]
                    for lv in overloads
                ],
                "levels": overloads,
            },
            "levels": out,
            **load(),
        },
    )


if __name__ == "__main__":
    main()
