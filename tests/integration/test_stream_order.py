"""StreamOrder with a backlog: every agent's next entry is checked against one shared snapshot
of the group's pending entries, not a scan of its own (two workers holding ~1,000 entries
would spend most of a core on those scans). Real redis-server."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from transcripts.bus import GROUP, STREAM
from transcripts.stream_order import StreamOrder, entries, order_of
from voice_gateway.bus_runtime import redis_client

AGENTS = 200


async def _add(r: aioredis.Redis, agent: str) -> str:
    return (await r.xadd(STREAM, {"event": json.dumps({"agent_id": agent})})).decode()


async def _read(r: aioredis.Redis, consumer: str, count: int) -> list[str]:
    got = entries(await r.xreadgroup(GROUP, consumer, {STREAM: ">"}, count=count))
    return [entry_id for entry_id, _ in got]


async def _xpending_calls(r: aioredis.Redis) -> int:
    stats = await r.info("commandstats")
    return int(stats.get("cmdstat_xpending", {}).get("calls", 0))


async def test_a_backlog_is_checked_against_one_snapshot(redis_url: str) -> None:
    r = redis_client(redis_url)
    try:
        await r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        first = {f"agent-{i}": await _add(r, f"agent-{i}") for i in range(AGENTS)}
        second = {f"agent-{i}": await _add(r, f"agent-{i}") for i in range(AGENTS)}
        # a dead worker holds the first entry of agent-0 (its agent read with XRANGE)
        assert await _read(r, "dead", 1) == [first["agent-0"]]
        held = await _read(r, "me", 2 * AGENTS)
        order = StreamOrder(r)
        for entry_id in held:  # what the worker does as it takes them
            agent = next(a for a, e in (*first.items(), *second.items()) if e == entry_id)
            order.remember(entry_id, agent)
        await r.config_resetstat()

        checks = [(first[a], a) for a in first if a != "agent-0"] + [(second[a], a) for a in second]
        answers = await asyncio.gather(*(order.older_pending(e, a) for e, a in checks))
        # first entries run at once; every second entry waits for its agent's first one,
        # agent-0's for the one the dead worker holds
        assert answers == [False] * (AGENTS - 1) + [True] * AGENTS
        assert order.scans == 1
        assert await _xpending_calls(r) == 1  # before: one or two XPENDING per check (~400)

        # agent-1's first entry is applied: its second one runs once a newer snapshot shows it
        await r.xack(STREAM, GROUP, first["agent-1"])
        await asyncio.sleep(order.max_age_s * 2)
        assert not await order.older_pending(second["agent-1"], "agent-1")
        assert await order.older_pending(second["agent-0"], "agent-0")  # still held elsewhere
        assert order.scans == 2
    finally:
        await r.aclose()


async def test_an_entry_delivered_after_a_snapshot_gets_a_newer_one(redis_url: str) -> None:
    r = redis_client(redis_url)
    try:
        await r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        older = await _add(r, "agent-x")
        assert await _read(r, "other", 1) == [older]  # another worker holds it
        order = StreamOrder(r, max_age_s=60.0)  # only a delivery can make a new snapshot
        assert not await order.older_pending(older, "agent-x")  # checked by its holder
        assert order.scans == 1
        newer = await _add(r, "agent-x")
        assert await _read(r, "me", 1) == [newer]
        order.remember(newer, "agent-x")
        assert await order.older_pending(newer, "agent-x")  # not answered from the old snapshot
        assert order.scans == 2
    finally:
        await r.aclose()


def test_each_callers_memory_is_its_own_order_key() -> None:
    def key(**event: str) -> str:
        return order_of({b"event": json.dumps(event).encode()})

    assert key(agent_id="agent-1") == "agent-1"
    assert key(agent_id="agent-1", identity_id="identity-a") == "agent-1/identity-a"
    assert key(agent_id="agent-1", identity_id="identity-b") != key(
        agent_id="agent-1", identity_id="identity-a"
    )
    assert order_of({b"other": b"x"}) == "" and order_of({"event": "not json"}) == ""
