"""Concurrent-call slots per identity.

In process: a counter per identity. With Redis: a sorted set `vg:calls:{identity}` whose
members are live calls (a lease id) scored by their expiry time on Redis's clock. Taking a
slot first drops expired members, then adds ours if fewer than the limit remain (one Lua
script, atomic across gateway instances). A live call refreshes its lease every lease/3
seconds; a gateway that dies (SIGKILL, host lost) stops refreshing, so its calls' slots free
themselves when the lease runs out — a crash never leaks a slot for longer than one lease.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Slot(Protocol):
    refresh_every_s: float  # math.inf: nothing to refresh

    async def refresh(self) -> None: ...

    async def release(self) -> None: ...


class CallSlots(Protocol):
    async def acquire(self, identity: str, limit: int) -> Slot | None:
        """A slot, or None when `limit` calls of `identity` are already live (0: no limit)."""
        ...


class _LocalSlot:
    refresh_every_s = float("inf")

    def __init__(self, owner: LocalCallSlots, identity: str) -> None:
        self.owner, self.identity, self.released = owner, identity, False

    async def refresh(self) -> None:
        return None

    async def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.release(self.identity)


class LocalCallSlots:
    def __init__(self) -> None:
        self.live: dict[str, int] = {}

    async def acquire(self, identity: str, limit: int) -> Slot | None:
        n = self.live.get(identity, 0)
        if limit > 0 and n >= limit:
            return None
        self.live[identity] = n + 1
        return _LocalSlot(self, identity)

    def release(self, identity: str) -> None:
        n = self.live.get(identity, 0) - 1
        if n > 0:
            self.live[identity] = n
        else:
            self.live.pop(identity, None)


# KEYS[1] = vg:calls:{identity}; ARGV = limit, lease_ms, member. 1 = taken, 0 = full.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[1])
if limit > 0 and redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
# Refresh: push our lease's expiry forward (re-adding it if it had lapsed during a stall).
_REFRESH = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


class _RedisSlot:
    def __init__(self, owner: RedisCallSlots, key: str, member: str) -> None:
        self.owner, self.key, self.member = owner, key, member
        self.refresh_every_s = owner.lease_s / 3

    async def refresh(self) -> None:
        try:
            await self.owner.refresh_script(
                keys=[self.key], args=[int(self.owner.lease_s * 1000), self.member]
            )
        except Exception as exc:
            log.warning("call slot: lease refresh failed (%r)", exc)

    async def release(self) -> None:
        try:
            await self.owner.redis.zrem(self.key, self.member)
        except Exception as exc:  # the lease expires on its own
            log.warning("call slot: release failed (%r); the lease will expire", exc)


class RedisCallSlots:
    """Leases in Redis, shared by every gateway instance. While Redis is unreachable, slots
    are counted per process (calls are not refused because Redis is down)."""

    def __init__(self, redis: Any, lease_s: float = 30.0, prefix: str = "vg:calls:") -> None:
        self.redis = redis
        self.lease_s = lease_s
        self.prefix = prefix
        self.local = LocalCallSlots()
        self.acquire_script = redis.register_script(_ACQUIRE)
        self.refresh_script = redis.register_script(_REFRESH)

    async def acquire(self, identity: str, limit: int) -> Slot | None:
        key, member = self.prefix + identity, f"{uuid.uuid4().hex}@{time.time():.0f}"
        try:
            ok = await self.acquire_script(
                keys=[key], args=[limit, int(self.lease_s * 1000), member]
            )
        except Exception as exc:
            log.warning("call slots: Redis unavailable (%r); counting per process", exc)
            return await self.local.acquire(identity, limit)
        return _RedisSlot(self, key, member) if int(ok) else None
