"""Transcript bus. Finished turns sit in the database outbox (written with their messages);
an OutboxPublisher moves them to a sink: Redis Streams (`RedisStreamsBus`), or, without Redis,
the sleeptime agent inside the gateway. Block changes travel on Redis pub/sub."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agents.memory_events import BlockChanged, MemoryEvents
from memory.models import TranscriptEvent
from memory.service import Memory

log = logging.getLogger(__name__)

STREAM = "vg:transcripts"
DEAD = "vg:transcripts:dead"
GROUP = "sleeptime"
MEMORY_PATTERN = "vg:memory:*"

Sink = Callable[[list[TranscriptEvent]], Awaitable[None]]
Epoch = Callable[[], Awaitable[str]]


def memory_channel(agent_id: str) -> str:
    return f"vg:memory:{agent_id}"


class OutboxPublisher:
    """Drains the outbox into `sink`; wakes on `notify()` and polls every `poll_s`. A failing
    sink (Redis down) is retried with backoff while calls and requests go on; rows are
    marked sent only after the sink accepted them (consumers dedupe by event_id).

    `epoch` names the sink's current incarnation (Redis's run id). When it changes, Redis
    restarted and may have lost entries that were published but not yet read, so rows sent
    within `resend_horizon_s` whose events no worker has recorded go out again.

    Drains are at least `min_interval_s` apart: a turn ending right after a drain waits for
    the next one (at most that long), so under load one drain (one read, the sink, one write)
    takes every turn that ended meanwhile instead of one each; an idle bus publishes at once.
    At 100 calls with a turn every 3 s that is ~4 turns a drain, at 500 ~17 (issue 20:
    docs/benchmarks.md#capacity-by-the-callers-measure-issue-20)."""

    def __init__(
        self,
        memory: Memory,
        sink: Sink,
        *,
        poll_s: float = 1.0,
        min_interval_s: float = 0.1,
        batch: int = 200,
        epoch: Epoch | None = None,
        resend_horizon_s: float = 3600.0,
    ) -> None:
        self.memory = memory
        self.sink = sink
        self.poll_s = poll_s
        self.min_interval_s = min_interval_s
        self._drained_at = -min_interval_s
        self.batch = batch
        self.epoch = epoch
        self.resend_horizon_s = resend_horizon_s
        self._wake = asyncio.Event()
        self._epoch: str | None = None
        self._epoch_checked = 0.0
        self.published = 0
        self.resent = 0
        self.failures = 0
        self.healthy = True

    def notify(self) -> None:
        self._wake.set()

    async def drain_once(self) -> int:
        rows = await self.memory.outbox.pending(self.batch)
        if not rows:
            return 0
        await self.sink([event for _, event in rows])
        await self.memory.outbox.mark_sent([row_id for row_id, _ in rows])
        self.published += len(rows)
        return len(rows)

    async def check_epoch(self, *, force: bool = False) -> None:
        if self.epoch is None or (not force and time.monotonic() - self._epoch_checked < 1.0):
            return
        current = await self.epoch()
        self._epoch_checked = time.monotonic()
        if self._epoch is not None and current != self._epoch:
            n = await self.memory.outbox.requeue_unprocessed(self.resend_horizon_s)
            self.resent += n
            log.warning(
                "the transcript bus restarted; %d published turns not yet processed go out again",
                n,
            )
        self._epoch = current

    async def run(self) -> None:
        backoff = 0.2
        while True:
            gap = self._drained_at + self.min_interval_s - time.monotonic()
            if gap > 0:
                await asyncio.sleep(gap)
            # cleared before the drain: a turn that ends while it runs wakes the next one,
            # instead of waiting for the next poll (up to `poll_s`)
            self._wake.clear()
            try:
                await self.check_epoch(force=not self.healthy)
                self._drained_at = time.monotonic()
                while await self.drain_once() >= self.batch:
                    pass
                if not self.healthy:
                    log.info("transcript bus is back; the outbox is drained")
                self.healthy, backoff = True, 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                if self.healthy:
                    log.warning("transcript bus unavailable (%s); turns stay in the outbox", exc)
                self.healthy = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_s)
            except TimeoutError:
                pass


class RedisStreamsBus:
    """XADD to `vg:transcripts` (approximate MAXLEN); block changes on `vg:memory:{agent}`."""

    def __init__(self, redis: Any, *, maxlen: int = 100_000) -> None:
        self.redis = redis
        self.maxlen = maxlen
        self.instance = uuid.uuid4().hex[:12]

    async def ensure_group(self) -> None:
        """Create the consumer group at the stream's start (also after Redis lost it)."""
        try:
            await self.redis.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        except Exception as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def epoch(self) -> str:
        return str((await self.redis.info("server"))["run_id"])

    async def publish(self, events: list[TranscriptEvent]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in events:
                pipe.xadd(
                    STREAM, {"event": e.model_dump_json()}, maxlen=self.maxlen, approximate=True
                )
            await pipe.execute()

    async def publish_block_change(self, ev: BlockChanged) -> None:
        body = json.dumps(
            {
                "label": ev.label,
                "version": ev.version,
                "scope": ev.scope,
                "identity_id": ev.identity_id,
                "origin": self.instance,
            }
        )
        await self.redis.publish(memory_channel(ev.agent_id), body)

    async def relay_block_changes(self, hub: MemoryEvents) -> None:
        """Deliver other instances' block changes to this process's live sessions."""
        backoff = 0.2
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.psubscribe(MEMORY_PATTERN)
                backoff = 0.2
                async for msg in pubsub.listen():
                    if msg.get("type") != "pmessage":
                        continue
                    self._deliver(hub, msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("memory pub/sub lost (%s); reconnecting", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:
                    log.debug("pubsub close failed", exc_info=True)

    def _deliver(self, hub: MemoryEvents, msg: dict[str, Any]) -> None:
        channel = (
            msg["channel"].decode() if isinstance(msg["channel"], bytes) else str(msg["channel"])
        )
        try:
            data = json.loads(msg["data"])
            if data.get("origin") == self.instance:
                return  # already delivered locally
            identity = data.get("identity_id")
            hub.deliver(
                BlockChanged(
                    channel.rsplit(":", 1)[1],
                    str(data["label"]),
                    int(data["version"]),
                    str(data.get("scope", "agent")),  # a notice without one: every session
                    None if identity is None else str(identity),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring a malformed memory notice on %s", channel)
