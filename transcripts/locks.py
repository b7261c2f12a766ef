"""Per-agent turn leases in Redis, shared by every gateway instance and the sleeptime workers
(`TurnLocks` of agents/locks.py, which the loop takes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents.locks import LocalLocks, LockTimeout

log = logging.getLogger(__name__)

# Release / renew only if the lease is still ours (its value is our fencing token).
_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
)
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
)


class RedisLocks:
    """Per-agent turn leases shared by every gateway instance: `SET vg:lock:{key} <fence> NX PX`.

    The fence is a number from INCR (strictly increasing per key), so a lease is never confused
    with an older holder's. A watchdog renews the lease while the turn runs; if it is lost (the
    process stalled past the lease), the turn is cancelled, which stores what it produced.
    Within a process a LocalLocks queue comes first, so only one task per key polls Redis.
    When Redis is unreachable, turns go on under the local lock alone (calls keep working
    during an outage; cross-instance exclusion resumes when Redis is back)."""

    def __init__(
        self, redis: Any, *, lease_ms: int = 15_000, wait_s: float = 60.0, prefix: str = "vg:lock:"
    ) -> None:
        self.redis = redis
        self.lease_ms = lease_ms
        self.wait_s = wait_s
        self.prefix = prefix
        self.local = LocalLocks()
        self.fences: dict[str, int] = {}  # key -> fence of the lease this process holds
        self.retry_after_s = 5.0  # after a Redis failure, local-only for this long
        self._down_until = 0.0

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        async with self.local.hold(key):
            name = self.prefix + key
            fence = await self._acquire(name)
            if fence is None:
                yield
                return
            self.fences[key] = fence
            holder = asyncio.current_task()
            watchdog = asyncio.create_task(self._renew(name, str(fence), holder))
            try:
                yield
            finally:
                watchdog.cancel()
                self.fences.pop(key, None)
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.redis.eval(_RELEASE, 1, name, str(fence)))

    async def _acquire(self, name: str) -> int | None:
        if time.monotonic() < self._down_until:
            return None  # Redis failed a moment ago: don't make every turn wait on it
        deadline = time.monotonic() + self.wait_s
        delay = 0.005
        try:
            fence = int(await self.redis.incr(name + ":fence"))
            while not await self.redis.set(name, str(fence), nx=True, px=self.lease_ms):
                if time.monotonic() > deadline:
                    raise LockTimeout(f"turn lock {name} is held elsewhere")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.1)
            return fence
        except LockTimeout:
            raise
        except Exception as exc:
            log.warning(
                "turn lock %s: Redis unavailable (%s); using the local lock only", name, exc
            )
            return None

    async def _renew(self, name: str, fence: str, holder: asyncio.Task[Any] | None) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                ok = await self.redis.eval(_RENEW, 1, name, fence, str(self.lease_ms))
            except Exception as exc:
                log.warning("turn lock %s: renewal failed (%s); retrying", name, exc)
                continue
            if not ok:
                log.error("turn lock %s: lease lost; cancelling the turn", name)
                if holder is not None:
                    holder.cancel()
                return
