"""The transcript bus inside a gateway process (the outbox publisher, the Redis pub/sub relay
of block changes, or without VG_REDIS_URL the in-process sleeptime consumer), and the
assembly of a `voice-gateway sleeptime` worker process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.bus import OutboxPublisher, RedisStreamsBus, Sink
from agents.sleeptime import SleeptimeAgent
from memory.models import TranscriptEvent

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway
    from voice_gateway.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class BusRuntime:
    publisher: OutboxPublisher
    redis: Any = None
    bus: RedisStreamsBus | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def notify(self) -> None:
        self.publisher.notify()

    async def redis_ok(self) -> bool:
        if self.redis is None:
            return True
        try:
            return bool(await self.redis.ping())
        except Exception:
            return False

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.publisher.drain_once(), 3)  # last flush
        if self.redis is not None:
            await self.redis.aclose()


def in_process_sink(agent: SleeptimeAgent, attempts: int) -> Sink:
    """Without Redis: apply each turn right here, in outbox order (per agent and caller). The
    turns that make no rewrite due are recorded in one transaction per drain
    (`SleeptimeAgent.note_pending`); a turn that keeps failing is given up after `attempts`
    tries (logged), so it cannot stall the turns behind it."""

    async def apply(events: list[TranscriptEvent]) -> None:
        try:  # the turns that make no rewrite due: all in one transaction
            events = await agent.note_pending(events)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # rolled back: each event on its own, with its retries
            log.warning("sleeptime: batch of %d events failed (%r)", len(events), exc)
        for event in events:
            for attempt in range(1, attempts + 1):
                try:
                    await agent.handle(event)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if attempt == attempts:
                        log.error(
                            "sleeptime: giving up on event %s of agent %s after %d tries: %r",
                            event.event_id,
                            event.agent_id,
                            attempts,
                            exc,
                        )
                    else:
                        log.warning(
                            "sleeptime: event %s failed (%r); retrying", event.event_id, exc
                        )
                        await asyncio.sleep(min(0.2 * 2**attempt, 2.0))

    return apply


def redis_client(url: str, max_connections: int = 100) -> Any:
    """A client whose commands wait (up to 5 s) for one of `max_connections` connections.
    redis-py's default pool (100 connections in 8.x) raises "Too many connections" at once
    instead: at 400 calls on one process with Redis, the turn locks and call-slot leases of a
    burst of turns went past 100 commands in flight, and those turns went on under the local
    lock only (tests/integration/test_redis_pool.py)."""
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=5,
        socket_timeout=5,
        socket_connect_timeout=2,
        health_check_interval=15,
    )
    return aioredis.Redis.from_pool(pool)


async def start_bus(gw: Gateway) -> BusRuntime:
    settings = gw.settings
    if settings.redis_url:
        client = redis_client(settings.redis_url, settings.redis_max_connections)
        bus = RedisStreamsBus(client, maxlen=settings.transcripts_maxlen)
        publisher = OutboxPublisher(gw.memory, bus.publish, epoch=bus.epoch)
        runtime = BusRuntime(publisher, client, bus)
        gw.memory_events.relay = bus.publish_block_change
        runtime.tasks.append(asyncio.create_task(bus.relay_block_changes(gw.memory_events)))
    else:
        agent = SleeptimeAgent(
            gw.memory, gw.loop, settings.sleeptime_every_turns, settings.sleeptime_model
        )
        runtime = BusRuntime(
            OutboxPublisher(gw.memory, in_process_sink(agent, settings.max_deliveries))
        )
    gw.memory.outbox.on_added = runtime.notify
    runtime.tasks.append(asyncio.create_task(runtime.publisher.run()))
    return runtime


async def run_worker(settings: Settings, consumer: str, concurrency: int) -> int:
    """`voice-gateway sleeptime`: consume `vg:transcripts` until SIGTERM/SIGINT."""
    import signal

    from agents.llm import LLMRegistry
    from agents.loop import AgentLoop
    from agents.memory_events import MemoryEvents
    from agents.worker import SleeptimeWorker
    from memory.service import Memory

    assert settings.redis_url
    memory = await Memory.open(
        settings.database_url,
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
    )
    client = redis_client(settings.redis_url, settings.redis_max_connections)
    bus = RedisStreamsBus(client, maxlen=settings.transcripts_maxlen)
    events = MemoryEvents()  # block changes go to every gateway over vg:memory:{agent}
    events.relay = bus.publish_block_change
    memory.on_block_change(events.changed)
    llms = LLMRegistry(
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        timeout_s=settings.llm_timeout_s,
        fallback=settings.llm_fallback,
        providers=settings.llm_providers(),
    )
    agent = SleeptimeAgent(
        memory,
        AgentLoop(memory, llms),
        settings.sleeptime_every_turns,
        settings.sleeptime_model,
        test_pause_s=settings.sleeptime_test_delay_s,
    )
    worker = SleeptimeWorker(
        bus,
        agent,
        consumer=consumer,
        concurrency=concurrency,
        claim_idle_ms=settings.claim_idle_ms,
        max_deliveries=settings.max_deliveries,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(llms.warmup)
        try:  # load the embedding model now rather than in the first rewrite
            await memory.archival.embedder_for(settings.default_embedding).embed(["warm up"])
        except Exception as exc:
            log.warning("could not warm up the embedder %s: %s", settings.default_embedding, exc)
        await worker.run(stop, lambda: print(f"sleeptime worker {consumer}: ready", flush=True))
    finally:
        await llms.aclose()
        await client.aclose()
        await memory.close()
    return 0
