"""Request rate limits: GCRA (the generic cell rate algorithm, a token bucket kept as one
timestamp per identity).

Each identity has a theoretical arrival time (TAT). A request at `now` moves it to
max(TAT, now) + 1/rps; it is refused while that would put TAT more than `burst` intervals
ahead of now, and `Retry-After` is the time until it would fit. One number per identity, no
background refill. With Redis the TAT lives under `vg:rl:{identity}` and a Lua script does the
check-and-set atomically on Redis's own clock, so every gateway instance draws from the same
budget; without Redis (or while it is unreachable) the budget is per process.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Protocol

log = logging.getLogger(__name__)


class RequestLimiter(Protocol):
    async def hit(self, identity: str, rps: float, burst: int) -> float:
        """Count one request; 0.0 if allowed, else the seconds to wait before a retry."""
        ...


class LocalLimiter:
    """GCRA in process memory (monotonic clock)."""

    def __init__(self, max_keys: int = 100_000) -> None:
        self.tat: dict[str, float] = {}
        self.max_keys = max_keys

    async def hit(self, identity: str, rps: float, burst: int) -> float:
        if rps <= 0:
            return 0.0
        now = time.monotonic()
        interval = 1.0 / rps
        new_tat = max(self.tat.get(identity, now), now) + interval
        allow_at = new_tat - max(1, burst) * interval
        if now < allow_at:
            return allow_at - now
        if len(self.tat) >= self.max_keys:  # many anonymous IPs: drop the idle ones
            self.tat = {k: v for k, v in self.tat.items() if v > now}
        self.tat[identity] = new_tat
        return 0.0


# KEYS[1] = vg:rl:{identity}; ARGV = interval_ms, burst. Returns retry-after in ms (0 = ok).
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - tonumber(ARGV[2]) * interval
if now < allow_at then return math.ceil(allow_at - now) end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(new_tat - now) + 1000)
return 0
"""


class RedisLimiter:
    """GCRA shared through Redis. On a Redis error the local limiter takes over for a few
    seconds (requests are never refused because Redis is down)."""

    def __init__(self, redis: Any, prefix: str = "vg:rl:") -> None:
        self.redis = redis
        self.prefix = prefix
        self.local = LocalLimiter()
        self._script = redis.register_script(_GCRA)
        self._down_until = 0.0

    async def hit(self, identity: str, rps: float, burst: int) -> float:
        if rps <= 0:
            return 0.0
        if time.monotonic() < self._down_until:
            return await self.local.hit(identity, rps, burst)
        try:
            ms = await self._script(
                keys=[self.prefix + identity], args=[1000.0 / rps, max(1, burst)]
            )
        except Exception as exc:  # any Redis failure: fall back, retry Redis later
            log.warning("rate limit: Redis unavailable (%r); limiting per process for now", exc)
            self._down_until = time.monotonic() + 5.0
            return await self.local.hit(identity, rps, burst)
        return int(ms) / 1000.0


def retry_after_header(seconds: float) -> str:
    """HTTP Retry-After is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(seconds)))
