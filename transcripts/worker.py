"""`voice-gateway sleeptime`: a crash-safe consumer of `vg:transcripts`.

- XREADGROUP with a stable consumer name (its own pending entries first), XAUTOCLAIM of
  entries another worker left idle for `claim_idle_ms` (it crashed); entries this worker holds
  are touched (XCLAIM JUSTID) every claim_idle_ms/3 so a live worker is never robbed.
- One memory's entries (an agent's, or one caller's of a shared agent: `order_of`) are
  applied one at a time and in stream order, across all workers: an entry waits while an older
  entry of the same key is pending anywhere in the group (`StreamOrder`), and the apply runs
  under that key's lease (`vg:sleeptime:lock:{key}`). Each key with entries here has a runner
  task that applies them in order; up to `concurrency` keys are applied at a time, so a slow
  one never holds up another. (Per agent before: one shared agent's callers took turns, and at
  500 callers of one agent the workers fell further behind every second.)
- The sleeptime agent records the event id with its state (idempotent); XACK after commit.
- A failed entry is retried with backoff (each retry counts as a delivery); after
  `max_deliveries` it goes to `vg:transcripts:dead` with the error. Malformed or foreign
  entries go there at once.
- On stop (SIGTERM) the entries being applied are finished; queued ones are released (their
  idle time set high, so another worker claims them at once)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from agents.sleeptime import Result, SleeptimeAgent
from memory.models import TranscriptEvent
from transcripts.bus import DEAD, GROUP, STREAM, RedisStreamsBus
from transcripts.locks import RedisLocks
from transcripts.stream_order import Entry, StreamOrder, decode, entries, order_key, order_of

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    processed: int = 0
    ran: int = 0
    dead: int = 0
    failed: int = 0
    lags_ms: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Held:
    """An entry this worker owns: queued, waiting its turn, retrying, or being applied."""

    entry_id: str
    fields: dict[Any, Any]
    key: str  # order_of(fields)
    retry_at: float = 0.0


class SleeptimeWorker:
    def __init__(
        self,
        bus: RedisStreamsBus,
        agent: SleeptimeAgent,
        *,
        consumer: str,
        concurrency: int = 4,
        claim_idle_ms: int = 30_000,
        max_deliveries: int = 5,
        block_ms: int = 1000,
        max_held: int = 512,
        forget_idle_ms: int = 3_600_000,
    ) -> None:
        self.bus, self.redis, self.agent = bus, bus.redis, agent
        self.consumer = consumer
        self.concurrency = max(1, concurrency)
        self.claim_idle_ms = max(200, claim_idle_ms)
        self.max_deliveries = max(1, max_deliveries)
        self.block_ms = block_ms
        self.max_held = max_held
        self.forget_idle_ms = forget_idle_ms
        self.stats = WorkerStats()
        self.order = StreamOrder(self.redis)
        lease_ms = max(1000, self.claim_idle_ms // 2)
        self.locks = RedisLocks(
            self.redis, lease_ms=lease_ms, wait_s=2 * lease_ms / 1000, prefix="vg:sleeptime:lock:"
        )
        self.held: dict[str, Held] = {}
        self._queues: dict[str, deque[Held]] = {}  # agent -> its entries here, oldest first
        self._slots = asyncio.Semaphore(self.concurrency)
        self._tg: asyncio.TaskGroup | None = None
        self._stopping = asyncio.Event()
        self._claim_cursor = "0-0"
        self._redis_down = False

    async def run(self, stop: asyncio.Event, ready: Callable[[], None] | None = None) -> None:
        """Consume until `stop` is set; `ready()` once the consumer group is there."""
        while not stop.is_set():
            try:
                await self.bus.ensure_group()
                break
            except Exception as exc:
                log.warning("worker %s: Redis unavailable (%s); waiting", self.consumer, exc)
                await _wait(stop, 1.0)
        log.info(
            "sleeptime worker %s: consuming %s (concurrency %d, claim idle %d ms)",
            self.consumer,
            STREAM,
            self.concurrency,
            self.claim_idle_ms,
        )
        await self._forget_stale_consumers()
        if ready is not None:
            ready()
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            chores = [tg.create_task(self._heartbeat()), tg.create_task(self._report())]
            await self._read_loop(stop)
            self._stopping.set()  # graceful stop: runners finish their current entry and exit
            for task in chores:
                task.cancel()
        await self._release(list(self.held))
        log.info("sleeptime worker %s stopped (%s)", self.consumer, self._summary())

    # reading ---------------------------------------------------------------------------

    async def _read_loop(self, stop: asyncio.Event) -> None:
        own = await self._redis("read own pending", self._read, "0", 1000)
        self._take(own or [])
        last_claim = 0.0
        while not stop.is_set():
            room = self.max_held - len(self.held)
            if room <= 0:
                await _wait(stop, 0.05)
                continue
            if time.monotonic() - last_claim > self.claim_idle_ms / 4000:
                last_claim = time.monotonic()
                self._take(await self._claim(min(room, 100)))
            got = await self._redis("XREADGROUP", self._read, ">", min(64, room))
            if got is None:
                await _wait(stop, 1.0)
                continue
            self._take(got)

    async def _read(self, start: str, count: int) -> list[Entry]:
        try:
            reply = await self.redis.xreadgroup(
                GROUP, self.consumer, {STREAM: start}, count=count, block=self.block_ms
            )
        except Exception as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("worker %s: the consumer group is gone (Redis restarted?)", self.consumer)
            await self.bus.ensure_group()
            return []
        return entries(reply)

    async def _claim(self, count: int) -> list[Entry]:
        reply = await self._redis(
            "XAUTOCLAIM",
            self.redis.xautoclaim,
            STREAM,
            GROUP,
            self.consumer,
            min_idle_time=self.claim_idle_ms,
            start_id=self._claim_cursor,
            count=count,
        )
        if not reply:
            return []
        self._claim_cursor = decode(reply[0]) or "0-0"
        claimed = [(decode(i), f or {}) for i, f in (reply[1] or []) if f is not None]
        if claimed:
            log.info("worker %s: reclaimed %d idle entries", self.consumer, len(claimed))
        return claimed

    def _take(self, got: list[Entry]) -> None:
        assert self._tg is not None
        for entry_id, fields in got:
            if entry_id in self.held:
                continue
            key = order_of(fields)
            self.order.remember(entry_id, key)
            held = self.held[entry_id] = Held(entry_id, fields, key)
            queue = self._queues.get(key)
            if queue is not None:  # its runner gets to it in turn, in stream order (a
                queue.append(held)  # reclaimed entry is older than the ones waiting for it)
                if len(queue) > 1 and order_key(queue[-2].entry_id) > order_key(entry_id):
                    ordered = sorted(queue, key=lambda e: order_key(e.entry_id))
                    queue.clear()
                    queue.extend(ordered)
            else:
                queue = self._queues[key] = deque([held])
                self._tg.create_task(self._runner(key, queue))

    def _drop(self, entry_id: str) -> None:
        self.held.pop(entry_id, None)
        self.order.forget(entry_id)

    # applying --------------------------------------------------------------------------

    async def _runner(self, key: str, queue: deque[Held]) -> None:
        """Apply one memory's entries in order, holding one of the `concurrency` slots while
        an entry is applied (never while waiting for an older entry or a retry)."""
        pause = 0.01
        try:
            while queue and not self._stopping.is_set():
                h = queue[0]
                if h.entry_id not in self.held:  # done, dead-lettered or handed back to Redis
                    queue.popleft()
                    continue
                if h.retry_at > time.monotonic():
                    await _wait(self._stopping, h.retry_at - time.monotonic())
                    continue
                if await self._must_wait(h):
                    await _wait(self._stopping, pause)
                    pause = min(pause * 2, 0.1)
                    continue
                pause = 0.01
                async with self._slots:
                    if not self._stopping.is_set():
                        await self._process(h)
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def _must_wait(self, h: Held) -> bool:
        if not h.key:
            return False
        try:
            return await self.order.older_pending(h.entry_id, h.key)
        except Exception as exc:
            self._down(exc)
            return True

    async def _process(self, h: Held) -> None:
        raw = h.fields.get(b"event", h.fields.get("event"))
        if raw is None:
            await self._dead(h, "foreign entry: no 'event' field")
            return
        try:
            event = TranscriptEvent.model_validate_json(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'event'}: {e['msg']}" for e in exc.errors()[:4]
            )
            await self._dead(h, f"malformed entry: {problems}")
            return
        task = asyncio.create_task(self._apply(h.key, event))
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if task.cancelled():
            await self._failed(h, "the agent's sleeptime lease was lost")
            return
        error = task.exception()
        if error is not None:
            log.error("worker %s: entry %s failed: %r", self.consumer, h.entry_id, error)
            await self._failed(h, f"{type(error).__name__}: {error}")
        else:
            await self._done(h, task.result())

    async def _apply(self, key: str, event: TranscriptEvent) -> Result:
        async with self.locks.hold(key):
            return await self.agent.handle(event)

    async def _done(self, h: Held, result: Result) -> None:
        await self._redis("XACK", self.redis.xack, STREAM, GROUP, h.entry_id)
        self._drop(h.entry_id)
        self.stats.processed += 1
        if result.outcome == "ran":
            self.stats.ran += 1
            if result.lag_ms is not None:
                self.stats.lags_ms.append(result.lag_ms)
                del self.stats.lags_ms[:-10_000]

    async def _failed(self, h: Held, error: str) -> None:
        self.stats.failed += 1
        rows = await self._redis(
            "XPENDING",
            self.redis.xpending_range,
            STREAM,
            GROUP,
            min=h.entry_id,
            max=h.entry_id,
            count=1,
        )
        if not rows:  # Redis is down or lost the entry: it stays where Redis has it
            self._drop(h.entry_id)
            return
        delivered = int(rows[0]["times_delivered"])
        if delivered >= self.max_deliveries:
            await self._dead(h, error)
            return
        # count this retry as a delivery (a crash now still moves it towards the dead letters)
        await self._redis(
            "XCLAIM", self.redis.xclaim, STREAM, GROUP, self.consumer, 0, [h.entry_id]
        )
        h.retry_at = time.monotonic() + min(0.25 * 2**delivered, self.claim_idle_ms / 1000)

    async def _dead(self, h: Held, error: str) -> None:
        log.warning("worker %s: dead-lettering %s: %s", self.consumer, h.entry_id, error)
        payload = {
            **{decode(k): v for k, v in h.fields.items()},
            "error": error[:2000],
            "entry_id": h.entry_id,
            "consumer": self.consumer,
        }
        ok = await self._redis(
            "XADD dead", self.redis.xadd, DEAD, payload, maxlen=100_000, approximate=True
        )
        if ok is not None:
            await self._redis("XACK", self.redis.xack, STREAM, GROUP, h.entry_id)
            self.stats.dead += 1
        self._drop(h.entry_id)

    # housekeeping ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Keep the entries this worker holds from looking abandoned."""
        interval = self.claim_idle_ms / 3000
        while True:
            await asyncio.sleep(interval)
            ids = list(self.held)
            for i in range(0, len(ids), 500):
                await self._redis(
                    "XCLAIM touch",
                    self.redis.xclaim,
                    STREAM,
                    GROUP,
                    self.consumer,
                    int(interval * 500),
                    ids[i : i + 500],
                    justid=True,
                )

    async def _forget_stale_consumers(self) -> None:
        """Drop consumers that hold nothing and were idle for `forget_idle_ms` (workers that
        ran under another name, e.g. the default host-pid). Consumers with pending entries
        stay until their entries are reclaimed."""
        rows = await self._redis("XINFO CONSUMERS", self.redis.xinfo_consumers, STREAM, GROUP)
        for c in rows or []:
            name = decode(c.get("name", ""))
            idle = int(c.get("idle", 0))
            if name != self.consumer and not c.get("pending") and idle > self.forget_idle_ms:
                await self._redis(
                    "XGROUP DELCONSUMER", self.redis.xgroup_delconsumer, STREAM, GROUP, name
                )
                log.info("worker %s: forgot idle consumer %s", self.consumer, name)

    async def _release(self, ids: list[str]) -> None:
        if not ids:
            return
        await self._redis(
            "XCLAIM release",
            self.redis.xclaim,
            STREAM,
            GROUP,
            self.consumer,
            0,
            ids,
            idle=self.claim_idle_ms * 10,
            justid=True,
        )
        log.info("worker %s: released %d queued entries", self.consumer, len(ids))

    async def _report(self, every_s: float = 10.0) -> None:
        last = 0
        while True:
            await asyncio.sleep(every_s)
            if self.stats.processed != last:
                rate = (self.stats.processed - last) / every_s
                last = self.stats.processed
                log.info("worker %s: %.1f entries/s; %s", self.consumer, rate, self._summary())

    def _summary(self) -> str:
        s = self.stats
        lags = sorted(s.lags_ms)
        p50 = f"{lags[len(lags) // 2]:.0f} ms" if lags else "-"
        return (
            f"{s.processed} processed, {s.ran} rewrites (lag p50 {p50}), {s.dead} dead, "
            f"{s.failed} failures, {len(self.held)} held"
        )

    async def _redis(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a Redis call; while Redis is unreachable log once and return None."""
        try:
            result = await fn(*args, **kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._down(exc, what)
            return None
        if self._redis_down:
            self._redis_down = False
            log.info("worker %s: Redis is reachable again", self.consumer)
        return result

    def _down(self, exc: Exception, what: str = "Redis call") -> None:
        if not self._redis_down:
            log.warning("worker %s: %s failed (%s); retrying", self.consumer, what, exc)
        self._redis_down = True


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass
