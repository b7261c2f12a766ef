"""One agent's turns are applied in stream order across workers; different agents run in
parallel. Workers run in this process here (the worker subprocess tests are next door) so the
test can plant a consumer that took an entry and died."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from agents.llm import LLMRegistry
from agents.loop import AgentLoop
from agents.sleeptime import SleeptimeAgent
from memory.models import BlockSpec, TranscriptEvent
from memory.service import Memory
from tests.support.sleeptime import Ledger, wait_until
from transcripts.bus import GROUP, STREAM, RedisStreamsBus
from transcripts.worker import SleeptimeWorker

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Stack:
    memory: Memory
    agent: SleeptimeAgent
    redis: aioredis.Redis
    bus: RedisStreamsBus
    ledger: Ledger
    seq: Iterator[int]

    async def new_agent(self) -> str:
        made = await self.memory.agents.create(
            user_id=None,
            name="ordered",
            system="",
            model="scripted/demo",
            embedding="local/all-minilm-l6-v2",
            blocks=[BlockSpec(label="human", value="")],
        )
        return made.id

    def event(self, agent_id: str, text: str, caller: str | None = None) -> TranscriptEvent:
        at = T0 + timedelta(seconds=next(self.seq))
        return TranscriptEvent(
            event_id=f"evt-{uuid.uuid4()}",
            agent_id=agent_id,
            identity_id=caller,
            turn_id=f"turn-{uuid.uuid4()}",
            source="text",
            user_text=text,
            agent_text="Noted.",
            agent_text_heard="Noted.",
            started_at=at,
            ended_at=at,
        )

    def worker(self, name: str, **kw: object) -> SleeptimeWorker:
        kw.setdefault("claim_idle_ms", 1000)
        kw.setdefault("block_ms", 100)
        return SleeptimeWorker(self.bus, self.agent, consumer=name, **kw)  # type: ignore[arg-type]


@pytest.fixture
async def stack(sqlite_url: str, redis_url: str) -> AsyncIterator[Stack]:
    memory = await Memory.open(sqlite_url)
    llms = LLMRegistry()
    client = aioredis.Redis.from_url(redis_url)
    bus = RedisStreamsBus(client)
    await bus.ensure_group()
    ledger = Ledger(sqlite_url)
    agent = SleeptimeAgent(memory, AgentLoop(memory, llms), every_turns=1)
    yield Stack(memory, agent, client, bus, ledger, iter(range(10**6)))
    await ledger.close()
    await client.aclose()
    await llms.aclose()
    await memory.close()


@contextlib.asynccontextmanager
async def working(*workers: SleeptimeWorker) -> AsyncIterator[None]:
    """Run the workers until the block ends (entered once they all consume)."""
    stop = asyncio.Event()
    ready = [asyncio.Event() for _ in workers]
    tasks = [asyncio.create_task(w.run(stop, r.set)) for w, r in zip(workers, ready, strict=True)]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 30)
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_a_newer_turn_waits_for_an_older_one_held_by_a_dead_worker(stack: Stack) -> None:
    agent = await stack.new_agent()
    paris = stack.event(agent, "I live in Paris.")
    london = stack.event(agent, "I moved to London.")
    await stack.bus.publish([paris])
    # a worker takes the Paris turn and dies without acknowledging it
    taken = await stack.redis.xreadgroup(GROUP, "ghost", {STREAM: ">"}, count=1)
    assert len(taken[0][1]) == 1
    await stack.bus.publish([london])

    worker = stack.worker("alive")
    async with working(worker):
        await wait_until(stack.ledger.all_processed_events([paris, london]), "both turns")
    values = [c.new_value for c in reversed(await stack.memory.blocks.history(agent, "human"))]
    # applied Paris first (after reclaiming it), then London: the newer fact wins
    assert values == ["Location: Paris", "Location: London"]
    assert worker.stats.processed == 2


async def test_two_workers_keep_each_agents_order(stack: Stack) -> None:
    agents = [await stack.new_agent() for _ in range(8)]
    cities = ["Oslo", "Rome", "Lima", "Kyiv", "Doha", "Bern"]
    events = [
        stack.event(a, f"I live in {city}.") for city in cities for a in agents
    ]  # interleaved: each agent moves six times
    a, b = stack.worker("a", concurrency=3), stack.worker("b", concurrency=3)
    async with working(a, b):
        for i in range(0, len(events), 4):  # as live traffic arrives: a few at a time
            await stack.bus.publish(events[i : i + 4])
            await asyncio.sleep(0.02)
        await wait_until(stack.ledger.all_processed_events(events), "every turn", timeout=120)
    assert a.stats.processed and b.stats.processed  # both took part
    for agent in agents:
        history = [c.new_value for c in reversed(await stack.memory.blocks.history(agent, "human"))]
        assert history == [f"Location: {c}" for c in cities]


async def test_callers_of_one_agent_are_applied_side_by_side_each_in_order(
    stack: Stack,
) -> None:
    """Each caller's memory is their own: two callers of one shared agent are rewritten at
    the same time (before, one agent's entries took turns whoever the caller), and each
    caller's turns still land in stream order."""
    agent = await stack.new_agent()
    callers = [
        (await stack.memory.identities.resolve(None, f"order-{i}", agent_id=agent)).id
        for i in range(4)
    ]
    cities = ["Oslo", "Rome", "Lima", "Kyiv"]
    events = [stack.event(agent, f"I live in {city}.", c) for city in cities for c in callers]
    busy, most = 0, 0
    handle = stack.agent.handle

    async def slow_handle(event: TranscriptEvent) -> Any:
        nonlocal busy, most
        busy += 1
        most = max(most, busy)
        try:
            await asyncio.sleep(0.05)  # a rewrite that takes a while (an LLM call)
            return await handle(event)
        finally:
            busy -= 1

    stack.agent.handle = slow_handle  # type: ignore[method-assign]
    a, b = stack.worker("a", concurrency=4), stack.worker("b", concurrency=4)
    async with working(a, b):
        await stack.bus.publish(events)
        await wait_until(stack.ledger.all_processed_events(events), "every turn", timeout=120)
    assert most >= 2, "one agent's callers were still applied one at a time"
    for caller in callers:
        history = await stack.memory.blocks.history(agent, "human", identity_id=caller)
        assert [c.new_value for c in reversed(history)] == [f"Location: {c}" for c in cities]


async def test_a_turn_published_twice_is_applied_once(stack: Stack) -> None:
    agent = await stack.new_agent()
    paris = stack.event(agent, "I live in Paris.")
    await stack.bus.publish([paris, paris])  # e.g. two gateways drained the same outbox row
    worker = stack.worker("only")
    async with working(worker):
        await wait_until(lambda: _processed(worker, 2), "both entries")
    assert [c.new_value for c in await stack.memory.blocks.history(agent, "human")] == [
        "Location: Paris"
    ]
    assert await stack.memory.archival.count(agent) == 1
    assert await stack.redis.xpending(STREAM, GROUP) == {
        "pending": 0,
        "min": None,
        "max": None,
        "consumers": [],
    }


async def _processed(worker: SleeptimeWorker, n: int) -> bool:
    return worker.stats.processed >= n
