"""The gateway's Redis client under a burst: more commands in flight than the pool
has connections wait for one instead of failing, so turn locks keep their cross-process
exclusion at hundreds of calls. Real redis-server."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError

from transcripts.locks import RedisLocks
from voice_gateway.bus_runtime import redis_client
from voice_gateway.settings import Settings

BURST = 64
POOL = 4


async def _burst(client: aioredis.Redis, key: str) -> list[object]:
    """BURST commands at once: each holds a connection until its reply is read."""
    return await asyncio.gather(*(client.incr(key) for _ in range(BURST)), return_exceptions=True)


async def test_a_burst_waits_for_connections(redis_url: str) -> None:
    plain = aioredis.Redis.from_url(redis_url, max_connections=POOL)  # redis-py's own pool
    ours = redis_client(redis_url, max_connections=POOL)
    try:
        failed = [r for r in await _burst(plain, "plain") if isinstance(r, Exception)]
        assert failed and all(isinstance(r, RedisConnectionError) for r in failed), failed[:3]
        results = await _burst(ours, "ours")
        assert sorted(results) == list(range(1, BURST + 1))  # type: ignore[type-var]
        assert int(await ours.get("ours")) == BURST
        assert ours.connection_pool.max_connections == POOL
    finally:
        await plain.aclose()
        await ours.aclose()


async def test_turn_locks_stay_on_redis_in_a_burst(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = redis_client(redis_url, max_connections=POOL)
    locks = RedisLocks(client)
    held: list[int] = []

    async def turn(i: int) -> None:
        async with locks.hold(f"conv-{i}"):
            held.append(locks.fences[f"conv-{i}"])
            await asyncio.sleep(0.02)

    try:
        with caplog.at_level(logging.WARNING, logger="transcripts.locks"):
            await asyncio.gather(*(turn(i) for i in range(BURST)))
        assert "Redis unavailable" not in caplog.text
        assert held == [1] * BURST  # every turn took a Redis lease (fence 1 of its key)
        assert await client.keys("vg:lock:conv-*:fence") and not await client.exists(
            *(f"vg:lock:conv-{i}" for i in range(BURST))
        )  # and released it
    finally:
        await client.aclose()


@pytest.mark.parametrize("bad", ["3", "0", "many", "20000"])
def test_bad_pool_sizes_are_refused(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VG_REDIS_MAX_CONNECTIONS", bad)
    with pytest.raises(ValidationError, match="redis_max_connections"):
        Settings()
