"""Sleeptime over Redis: lag from turn end to block updated, worker throughput, outbox drain.

Real parts: a private redis-server, a SQLite file (or PostgreSQL with --postgres), two
`voice-gateway sleeptime` worker processes (concurrency 4 each) running the scripted model
(which archives each batch and rewrites `human`). This process plays the gateways: it stores
finished turns in the outbox (as the agent loop does) and runs the real OutboxPublisher into
`vg:transcripts`; it listens on `vg:memory:*` for the block changes.

1. lag: turns at a sustained rate (50/s) over 200 agents, each agent picked at random; every
   5th turn of an agent makes a rewrite due (VG_SLEEPTIME_EVERY_TURNS=5, each batch states a
   new fact). Lag = the `vg:memory:{agent}` notice of the new `human` version minus the end
   time of the turn that made it due. Baseline in the same run: 5 turns/s over 5 agents.
   Target: p99 < 1 s at 50 turns/s.
2. throughput: turns published while no worker runs, then one worker drains them (turns/s).
3. outbox drain: turns stored while Redis is down, then Redis starts; turns/s from the first
   publish until the outbox is empty (and the time Redis was back before publishing began).

Run: `.venv/bin/python bench/sleeptime_lag.py [--quick] [--postgres]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _common import emit, parser, postgres_admin_url, ratio, summary, temp_postgres

from memory.models import BlockSpec, TranscriptEvent
from memory.service import Memory
from tests.support.procs import WorkerProcess
from tests.support.services import RedisServer, start_redis
from transcripts.bus import OutboxPublisher, RedisStreamsBus

EVERY = 5


class Load:
    """Stores turns like a gateway (outbox + publisher) and times the resulting rewrites."""

    def __init__(self, memory: Memory, agents: list[str]) -> None:
        self.memory = memory
        self.agents = agents
        self.turns: dict[str, int] = dict.fromkeys(agents, 0)
        self.due_at: dict[tuple[str, int], float] = {}  # (agent, rewrite number) -> turn end
        self.seen: dict[tuple[str, int], float] = {}  # (agent, rewrite number) -> notice
        self.rng = random.Random(7)

    def event(self, agent: str) -> TranscriptEvent:
        n = self.turns[agent] = self.turns[agent] + 1
        text = f"Remember that I like item {n}." if n % EVERY == 1 else f"Small talk {n}."
        now = datetime.now(UTC)
        if n % EVERY == 0:
            self.due_at[(agent, n // EVERY)] = now.timestamp()
        return TranscriptEvent(
            event_id=f"evt-{uuid.uuid4()}",
            agent_id=agent,
            turn_id=f"turn-{uuid.uuid4()}",
            source="text",
            user_text=text,
            agent_text="Okay.",
            agent_text_heard="Okay.",
            started_at=now,
            ended_at=now,
        )

    async def run(
        self, rate: float, seconds: float, agents: list[str] | None = None
    ) -> list[tuple[str, int]]:
        """Turns at `rate`/s for `seconds`; returns the rewrites that became due."""
        before = set(self.due_at)
        start, i = time.monotonic(), 0
        while (at := start + i / rate) < start + seconds:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            await self.memory.finish_turn(self.event(self.rng.choice(agents or self.agents)))
            i += 1
        return sorted(set(self.due_at) - before)

    async def listen(self, redis: Any) -> None:
        pubsub = redis.pubsub()
        await pubsub.psubscribe("vg:memory:*")
        try:
            async for msg in pubsub.listen():
                if msg.get("type") != "pmessage":
                    continue
                now = time.time()
                data = json.loads(msg["data"])
                agent = msg["channel"].decode().rsplit(":", 1)[1]
                if data.get("label") == "human":
                    self.seen.setdefault((agent, int(data["version"]) - 1), now)
        finally:
            await pubsub.aclose()

    async def lags(self, due: list[tuple[str, int]], within_s: float) -> list[float]:
        async def all_seen() -> bool:
            return all(k in self.seen for k in due)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await until(all_seen)
        return [(self.seen[k] - self.due_at[k]) * 1000 for k in due if k in self.seen]


async def until(check: Callable[[], Awaitable[bool]], every: float = 0.02) -> float:
    """Poll `check` until true; returns the time it was (wrap in asyncio.timeout)."""
    while True:
        if await check():
            return time.monotonic()
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def database(use_postgres: bool, tmp: Path) -> AsyncIterator[str]:
    admin = postgres_admin_url() if use_postgres else None
    if use_postgres and admin is None:
        raise SystemExit("--postgres: no PostgreSQL server found")
    if admin:
        async with temp_postgres(admin) as url:
            yield url
    else:
        yield f"sqlite+aiosqlite:///{tmp / 'bench.db'}"


async def processed(memory: Memory) -> int:
    from sqlalchemy import func, select

    from memory.orm import ProcessedEvent

    async with memory.db.read() as s:
        return int(await s.scalar(select(func.count()).select_from(ProcessedEvent)) or 0)


async def wait_processed(memory: Memory, target: int, within_s: float) -> float:
    async def done() -> bool:
        return await processed(memory) >= target

    async with asyncio.timeout(within_s):
        return await until(done)


async def bench(quick: bool, use_postgres: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="vg-bench-sleeptime-"))
    n_agents, rate = 200, 50.0
    seconds = 20.0 if quick else 60.0
    redis_server: RedisServer = start_redis()
    import redis.asyncio as aioredis

    async with database(use_postgres, tmp) as url:
        memory = await Memory.open(url)
        client = aioredis.Redis.from_url(redis_server.url)
        bus = RedisStreamsBus(client)
        publisher = OutboxPublisher(memory, bus.publish, epoch=bus.epoch)
        memory.outbox.on_added = publisher.notify
        agents = []
        for i in range(n_agents):
            a = await memory.agents.create(
                user_id=None,
                name=f"bench-{i}",
                system="",
                model="scripted/demo",
                embedding="local/all-minilm-l6-v2",
                blocks=[BlockSpec(label="human", value="", limit=100_000)],
            )
            agents.append(a.id)
        load = Load(memory, agents)
        env = {"VG_SLEEPTIME_EVERY_TURNS": str(EVERY), "VG_LOG_LEVEL": "WARNING"}

        def worker(name: str) -> WorkerProcess:
            return WorkerProcess(
                url, redis_server.url, tmp / f"{name}.log", consumer=name, concurrency=4, env=env
            )

        async def outbox_empty() -> bool:
            return await memory.outbox.depth() == 0

        workers = [worker("w1"), worker("w2")]
        tasks = [asyncio.create_task(publisher.run()), asyncio.create_task(load.listen(client))]
        try:
            for w in workers:
                w.start()
            light_due = await load.run(5.0, 10.0 if quick else 30.0, agents[:5])
            light = await load.lags(light_due, 30)
            loaded_due = await load.run(rate, seconds)
            loaded = await load.lags(loaded_due, 60)
            lost = len(loaded_due) - len(loaded)
            total = sum(load.turns.values())
            await wait_processed(memory, total, 120)
            for w in workers:
                w.stop()

            # 2. one worker's throughput on a backlog
            backlog = 1000 if quick else 4000
            for _ in range(backlog):
                await memory.finish_turn(load.event(load.rng.choice(agents)))
            async with asyncio.timeout(60):
                await until(outbox_empty)
            solo = worker("solo")
            solo.start()
            n0 = await processed(memory)
            t0 = time.monotonic()
            t1 = await wait_processed(memory, total + backlog, 300)
            solo.stop()
            throughput = (total + backlog - n0) / (t1 - t0)

            # 3. the outbox after a Redis outage (no workers: publishing only)
            spooled = 2000 if quick else 10_000
            redis_server.stop()
            for _ in range(spooled):
                await memory.finish_turn(load.event(load.rng.choice(agents)))
            assert await memory.outbox.depth() == spooled
            redis_server.start()
            back = time.monotonic()

            async def publishing() -> bool:
                return await memory.outbox.depth() < spooled

            async with asyncio.timeout(120):
                first = await until(publishing, 0.005)
                drained = await until(outbox_empty, 0.005)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for w in workers:
                w.stop()
            await client.aclose()
            await memory.close()
            redis_server.stop()
    shutil.rmtree(tmp, ignore_errors=True)  # kept when the run failed (worker logs are there)

    light_s, loaded_s = summary(light), summary(loaded)
    return {
        "quick": quick,
        "database": "postgresql" if use_postgres else "sqlite",
        "agents": n_agents,
        "workers": 2,
        "worker_concurrency": 4,
        "every_turns": EVERY,
        "lag_turn_end_to_block_updated": {
            "rate_turns_per_s": rate,
            "seconds": seconds,
            "rewrites": loaded_s,
            "rewrites_not_seen": lost,
            "target_p99_ms": 1000,
            "meets_target": bool(loaded) and not lost and loaded_s["p99_ms"] < 1000,
        },
        "baseline_lag_at_5_turns_per_s_over_5_agents": light_s,
        "p99_ratio_vs_baseline": ratio(float(loaded_s.get("p99_ms", 0)), light_s.get("p99_ms", 0)),
        "one_worker_throughput": {
            "backlog_turns": backlog,
            "rewrites_in_it": backlog // EVERY,
            "turns_per_s": round(throughput, 1),
        },
        "outbox_drain_after_outage": {
            "spooled_turns": spooled,
            "redis_back_to_first_publish_ms": round((first - back) * 1000, 1),
            "drain_turns_per_s": round(spooled / max(drained - first, 1e-6), 1),
            "redis_back_to_empty_ms": round((drained - back) * 1000, 1),
        },
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--postgres", action="store_true", help="PostgreSQL instead of SQLite")
    args = p.parse_args()
    emit(
        "sleeptime_lag" + ("_postgres" if args.postgres else ""),
        asyncio.run(bench(args.quick, args.postgres)),
    )


if __name__ == "__main__":
    main()
