"""Per-agent turn leases in Redis: two gateway instances never run a turn of one agent at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agents.locks import LockTimeout
from tests.support.services import RedisServer
from transcripts.locks import RedisLocks


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    a = aioredis.Redis.from_url(redis_url)
    b = aioredis.Redis.from_url(redis_url)
    yield a, b
    await a.aclose()
    await b.aclose()


async def test_two_instances_never_overlap(clients: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    one, two = RedisLocks(clients[0]), RedisLocks(clients[1])
    inside: list[str] = []
    overlaps = 0
    fences: list[int] = []

    async def turn(locks: RedisLocks, name: str) -> None:
        nonlocal overlaps
        async with locks.hold("agent-1"):
            fences.append(locks.fences["agent-1"])
            if inside:
                overlaps += 1
            inside.append(name)
            await asyncio.sleep(0.02)
            inside.remove(name)

    await asyncio.gather(*(turn(one if i % 2 else two, f"t{i}") for i in range(12)))
    assert overlaps == 0
    assert len(set(fences)) == 12
    assert await clients[0].get("vg:lock:agent-1") is None  # released


async def test_other_agents_do_not_wait(clients: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    one, two = RedisLocks(clients[0]), RedisLocks(clients[1], wait_s=0.3)
    async with one.hold("agent-a"):
        async with two.hold("agent-b"):
            pass
        with pytest.raises(LockTimeout):
            async with two.hold("agent-a"):
                pass


async def test_lost_lease_cancels_the_turn(clients: tuple[aioredis.Redis, aioredis.Redis]) -> None:
    locks = RedisLocks(clients[0], lease_ms=300)

    async def turn() -> None:
        async with locks.hold("agent-x"):
            await clients[1].delete("vg:lock:agent-x")  # e.g. the lease expired during a stall
            await asyncio.sleep(5)

    task = asyncio.create_task(turn())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 3)
    assert task.cancelled()


async def test_redis_down_falls_back_to_the_local_lock(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url, socket_connect_timeout=0.5)
    locks = RedisLocks(client)
    redis_server.stop()
    try:
        order: list[str] = []

        async def turn(name: str) -> None:
            async with locks.hold("agent-y"):
                order.append(f"{name}+")
                await asyncio.sleep(0.01)
                order.append(f"{name}-")

        await asyncio.wait_for(asyncio.gather(turn("a"), turn("b")), 10)
        assert order in (["a+", "a-", "b+", "b-"], ["b+", "b-", "a+", "a-"])
    finally:
        redis_server.start()
        await client.aclose()
