"""Sleeptime in worker processes next to a benchmark gateway (PostgreSQL + Redis, sleeptime
in workers): real `voice-gateway sleeptime` processes on the gateway's database and
Redis, running the scripted model (it archives each batch and rewrites `human`; no network),
a memory rewrite due every VG_SLEEPTIME_EVERY_TURNS turns as in production. The gateway then
does what it does in a deployment with workers: publishes every finished turn to
`vg:transcripts` and relays the workers' block changes (`vg:memory:*`) to its calls."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.procs import WorkerProcess
from transcripts.bus import GROUP, STREAM

MODEL = "scripted/demo"
EVERY_TURNS = 5  # the default of VG_SLEEPTIME_EVERY_TURNS
CONCURRENCY = 4  # `voice-gateway sleeptime --concurrency`
# On the gateway's machine the workers run below its priority (docs/operations.md): at 400
# calls on 2 vCPUs, two workers at the same priority took 0.49 cores, the machine was 95 %
# busy and 115-186 of 2,313 turns went unanswered
NICE = 10


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/<pid>/stat), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class SleeptimeFleet:
    """`n` workers for one gateway; `cpu_s()` sums their CPU; `consumed()` reads the stream's
    consumer group (entries read, still pending, lag) from Redis."""

    n: int
    database_url: str
    redis_url: str
    logs: Path
    name: str
    nice: int = NICE
    workers: list[WorkerProcess] = field(default_factory=list)

    def start(self) -> SleeptimeFleet:
        env = {
            "VG_SLEEPTIME_MODEL": MODEL,
            "VG_SLEEPTIME_EVERY_TURNS": str(EVERY_TURNS),
            "VG_LOG_LEVEL": "WARNING",
        }
        for i in range(self.n):
            worker = WorkerProcess(
                self.database_url,
                self.redis_url,
                self.logs / f"{self.name}.sleeptime-{i}.log",
                consumer=f"{self.name}-{i}",
                concurrency=CONCURRENCY,
                env=env,
                nice=self.nice,
            )
            self.workers.append(worker.start())
        return self

    def cpu_s(self) -> float:
        return sum(_cpu_s(w.proc.pid) for w in self.workers if w.proc is not None)

    def consumed(self) -> dict[str, Any]:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            groups = client.xinfo_groups(STREAM)
            published = client.xinfo_stream(STREAM)["entries-added"]
        except redis.ResponseError:  # no stream yet
            return {"published": 0, "read": 0, "pending": 0, "lag": 0}
        finally:
            client.close()
        group = next((g for g in groups if g["name"] in (GROUP, GROUP.encode())), {})
        return {
            "published": published,
            "read": group.get("entries-read") or 0,
            "pending": group.get("pending") or 0,
            "lag": group.get("lag") or 0,
        }

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


def measured(fleet: SleeptimeFleet | None, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`run()`'s level, with the fleet's CPU over it (set-up included) and what the workers have
    consumed so far (`sleeptime_workers`); `run()` as it is without a fleet."""
    if fleet is None:
        return run()
    cpu0, t0 = fleet.cpu_s(), time.monotonic()
    level = run()
    cores = (fleet.cpu_s() - cpu0) / (time.monotonic() - t0)
    figures = {"processes": fleet.n, "nice": fleet.nice, "cores": round(cores, 3)}
    figures.update(fleet.consumed())
    level["sleeptime_workers"] = figures
    return level
