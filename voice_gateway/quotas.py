"""Rate limits and quotas per identity: REST requests/s, concurrent calls, call minutes/day.

An identity is a user key ("user:<id>"), the admin key ("admin") or an anonymous loopback
caller ("anon:<ip>"); a phone call counts against the owner of the agent it reaches (or
"admin" for agents without an owner). Limits come from the settings, overridden per user
(`voice-gateway users create NAME --rps N --max-calls N --call-minutes N`). Request rates and
call slots live in Redis when it is configured (shared by every instance), else in process;
call minutes always live in the database (durable, shared by every instance on it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from memory.usage import LimitOverrides, UsageStore
from voice_gateway.call_slots import CallSlots, LocalCallSlots, RedisCallSlots, Slot
from voice_gateway.metrics import Metrics
from voice_gateway.ratelimit import LocalLimiter, RedisLimiter, RequestLimiter
from voice_gateway.settings import Settings

log = logging.getLogger(__name__)
LIMITS_TTL_S = 30.0  # per-user overrides are re-read from the database this often


@dataclass(frozen=True, slots=True)
class Limits:
    rps: float  # 0: no request limit
    burst: int
    max_calls: int  # 0: no limit
    call_minutes: float  # per UTC day; 0: no limit


class QuotaExceeded(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail  # kind: calls | minutes


class Quotas:
    def __init__(
        self, settings: Settings, usage: UsageStore, metrics: Metrics, redis: Any = None
    ) -> None:
        self.settings = settings
        self.usage = usage
        self.metrics = metrics
        self.limiter: RequestLimiter = RedisLimiter(redis) if redis is not None else LocalLimiter()
        self.slots: CallSlots = (
            RedisCallSlots(redis, settings.call_lease_s) if redis is not None else LocalCallSlots()
        )
        self._cache: dict[str, tuple[float, Limits]] = {}

    def defaults(self, o: LimitOverrides | None = None) -> Limits:
        s, o = self.settings, o or LimitOverrides()
        rps = s.rate_limit_rps if o.rps is None else o.rps
        if o.burst is not None:
            burst = o.burst
        elif o.rps is None and s.rate_limit_burst:
            burst = s.rate_limit_burst
        else:  # two seconds' worth
            burst = math.ceil(2 * rps)
        return Limits(
            rps=rps,
            burst=max(1, burst),
            max_calls=s.max_concurrent_calls if o.max_calls is None else o.max_calls,
            call_minutes=s.call_minutes_per_day if o.call_minutes is None else o.call_minutes,
        )

    async def limits(self, identity: str) -> Limits:
        if not identity.startswith("user:"):
            return self.defaults()
        hit = self._cache.get(identity)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        limits = self.defaults(await self.usage.limits(identity[5:]))
        self._cache[identity] = (time.monotonic() + LIMITS_TTL_S, limits)
        return limits

    def forget(self, identity: str) -> None:
        self._cache.pop(identity, None)

    async def check_request(self, identity: str) -> tuple[float, Limits]:
        """(seconds to wait, limits): 0.0 when the request may go ahead."""
        limits = await self.limits(identity)
        wait = await self.limiter.hit(identity, limits.rps, limits.burst)
        if wait > 0:
            self.metrics.rate_limited.labels("rest").inc()
        return wait, limits

    async def open_call(self, identity: str) -> CallGuard:
        """Admit a call (raises QuotaExceeded when over concurrent calls or out of minutes)."""
        limits = await self.limits(identity)
        limit_s = limits.call_minutes * 60
        used = await self.usage.call_seconds(identity) if limit_s > 0 else 0.0
        if limit_s > 0 and used >= limit_s:
            self.metrics.rate_limited.labels("minutes").inc()
            raise QuotaExceeded("minutes", "the call minutes for today are used up")
        slot = await self.slots.acquire(identity, limits.max_calls)
        if slot is None:
            self.metrics.rate_limited.labels("calls").inc()
            raise QuotaExceeded("calls", f"too many concurrent calls (at most {limits.max_calls})")
        return CallGuard(self, identity, slot, limit_s, used)


class CallGuard:
    """One admitted call: its slot (lease refreshed while the call lives) and its minutes
    (added to the day's total every VG_QUOTA_FLUSH_S and at the end)."""

    def __init__(
        self, quotas: Quotas, identity: str, slot: Slot, limit_s: float, used: float
    ) -> None:
        self.quotas, self.identity, self.slot = quotas, identity, slot
        self.limit_s = limit_s  # 0: no minute quota
        self.used = used  # the day's total at the last flush (all calls of the identity)
        self.mark = time.monotonic()  # counted up to here
        self.closed = False

    def _next_wait(self) -> float:
        wait = self.slot.refresh_every_s
        if self.limit_s > 0:
            remaining = self.limit_s - self.used - (time.monotonic() - self.mark)
            wait = min(wait, self.quotas.settings.quota_flush_s, max(0.0, remaining))
        return max(0.05, wait)

    async def _flush(self) -> None:
        now = time.monotonic()
        try:
            self.used = await self.quotas.usage.add_call_seconds(self.identity, now - self.mark)
            self.mark = now
        except Exception as exc:  # the database is briefly away: count it next time
            log.warning("call minutes: could not record usage (%r)", exc)

    async def watch(self, end_call: Callable[[], Awaitable[None]]) -> None:
        """Runs in the call's task group: refresh the lease, count minutes, and call
        `end_call` (error event + close 4429) when the day's minutes are used up."""
        if self.limit_s <= 0 and math.isinf(self.slot.refresh_every_s):
            return
        next_refresh = time.monotonic() + self.slot.refresh_every_s
        while True:
            await asyncio.sleep(self._next_wait())
            if time.monotonic() >= next_refresh:
                await self.slot.refresh()
                next_refresh = time.monotonic() + self.slot.refresh_every_s
            if self.limit_s > 0:
                await self._flush()
                if self.used >= self.limit_s - 0.05:
                    self.quotas.metrics.rate_limited.labels("minutes").inc()
                    log.info("call minutes of %s used up: ending the call", self.identity)
                    await end_call()
                    return

    async def close(self) -> None:
        """The call ended: count its last seconds and free its slot (idempotent)."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._flush()
        finally:  # even if cancelled mid-write: a slot must not leak
            await self.slot.release()
