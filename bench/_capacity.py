"""Capacity helpers of bench/voice_concurrency.py: several gateway workers on one
port (as `voice-gateway serve --workers N`), and the overload figures of a level offered more
calls than the gateway admits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from _voice import GatewayProcess, start_gateway


@dataclass
class GatewayGroup:
    """N gateway processes on one port (SO_REUSEPORT), with GatewayProcess's interface: CPU is
    summed over the workers; latency figures are the worst worker's (each process has its own
    event loop, so a call is as late as its worker)."""

    workers: list[GatewayProcess]

    @property
    def port(self) -> int:
        return self.workers[0].port

    @property
    def url(self) -> str:
        return self.workers[0].url

    @property
    def ws_url(self) -> str:
        return self.workers[0].ws_url

    def reset(self) -> None:
        for w in self.workers:
            w.reset()

    def cpu(self) -> dict[str, Any]:
        each = [w.cpu() for w in self.workers]
        out = dict(each[0])
        for key in ("process_cpu_s", "main_thread_cpu_s", "process_cores", "main_thread_cores"):
            out[key] = round(sum(c[key] or 0.0 for c in each), 3)
        out["per_worker_main_thread_cores"] = [c["main_thread_cores"] for c in each]
        return out

    def stats(self) -> dict[str, Any]:
        each = [w.stats() for w in self.workers]

        def worst(key: str) -> dict[str, Any]:
            return max((s[key] for s in each), key=lambda v: v.get("p99_ms", 0.0))

        frames: dict[str, int] = {}
        for s in each:
            frames.update(s["frames"])
        return {
            **each[0],
            "frames": frames,
            "frame_handling": worst("frame_handling"),
            "loop_lag": worst("loop_lag"),
            "gc_pauses": worst("gc_pauses"),
            "calls_per_worker": [len(s["frames"]) for s in each],
        }

    def agent(self, **body: Any) -> str:
        return self.workers[0].agent(**body)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()


def start_workers(n: int, database_url: str, **kw: Any) -> GatewayProcess | GatewayGroup:
    """One gateway process, or `n` sharing a port (needs `redis_url` in kw for n > 1: the turn
    locks and transcript bus must be Redis's, as `serve --workers N` demands)."""
    if n == 1:
        return start_gateway(database_url, **kw)
    from tests.support.servers import free_port

    if not kw.get("redis_url"):
        raise SystemExit("--workers > 1 needs Redis (the bench starts one: is redis-server there?)")
    port = free_port()
    name = kw.pop("log_name", "gateway")
    return GatewayGroup(
        [start_gateway(database_url, port=port, log_name=f"{name}.w{i}", **kw) for i in range(n)]
    )


def capacity_gateways(
    tmp: str, policies: tuple[str, ...], name: str, **kw: Any
) -> dict[str, GatewayProcess]:
    """One gateway per turn-detection policy, as the whisper capacity benches compare them:
    local whisper, instant TTS, a one-line reply, no sleeptime, no admission control (the
    bench measures what the process holds), CPU split into STT, turn detection and the rest;
    `kw`: anything more (e.g. the Twilio auth token)."""
    from pathlib import Path

    return {
        policy: start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / f'{name}-{policy}.db'}",
            llm={"reply": "Sure thing."},
            stt="whisper",
            tts="instant",
            turn_detection=policy,
            sleeptime_every_turns=10**6,
            idle_timeout_s=600.0,
            log_name=f"{name}.{policy}",
            cpu_split=True,
            process_max_calls=0,
            admit_max_lag_ms=0,
            **kw,
        )
        for policy in policies
    }


def overload_figures(results: list[dict[str, Any]], offered: int) -> dict[str, Any]:
    """How the offered calls fared: admitted (session.started), refused cleanly (closed 1013
    before any event), and half-served (anything else: admitted then failed, or refused in
    another way)."""
    admitted = [c for r in results for c in r.get("calls", []) if c["session_id"]]
    refused = [c for r in results for c in r.get("refused", [])]
    clean = [c for c in refused if c["close_code"] == 1013 and not c["events"]]
    bad_admitted = [c for c in admitted if c["errors"] or c["close_code"] != 1000]
    return {
        "offered": offered,
        "admitted": len(admitted),
        "refused_1013": len(clean),
        "half_served": len(refused) - len(clean) + len(bad_admitted),
        "refusal_close_codes": sorted({c["close_code"] for c in refused}),
    }
