"""Who hears of a block change (`memory.updated`): the sessions that see the block, in this
process and over Redis pub/sub from another one (a sleeptime worker, another gateway). Real
redis-server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from agents.memory_events import BlockChanged, MemoryEvents
from transcripts.bus import RedisStreamsBus, memory_channel
from voice_gateway.bus_runtime import redis_client

AGENT = "agent-1"
WHO = {"ana": "identity-ana", "ben": "identity-ben", "anon": None}


@contextlib.asynccontextmanager
async def sessions(hub: MemoryEvents) -> AsyncIterator[dict[str, asyncio.Queue[BlockChanged]]]:
    """One subscribed session per caller of WHO, all on AGENT."""
    async with contextlib.AsyncExitStack() as stack:
        yield {
            who: await stack.enter_async_context(hub.subscribe(AGENT, identity))
            for who, identity in WHO.items()
        }


def drained(q: asyncio.Queue[BlockChanged]) -> list[tuple[str, int]]:
    out = []
    while not q.empty():
        ev = q.get_nowait()
        out.append((ev.label, ev.version))
    return out


async def changes(hub: MemoryEvents) -> None:
    await hub.changed(AGENT, "human", 5, "caller", "identity-ana")  # Ana's own copy
    await hub.changed(AGENT, "human", 2, "caller", None)  # the template new callers start from
    await hub.changed(AGENT, "persona", 3, "agent", None)  # agent-wide
    await hub.changed("agent-2", "persona", 9, "agent", None)  # another agent's


EXPECTED = {
    "ana": [("human", 5), ("persona", 3)],
    "ben": [("persona", 3)],
    "anon": [("human", 2), ("persona", 3)],
}


async def test_in_process_a_change_reaches_the_sessions_that_see_it() -> None:
    hub = MemoryEvents()
    async with sessions(hub) as qs:
        await changes(hub)
        assert {who: drained(q) for who, q in qs.items()} == EXPECTED
    assert hub._subs == {}  # every subscription was removed on the way out


async def test_over_redis_the_same_rule_holds(redis_url: str) -> None:
    sender, receiver = redis_client(redis_url), redis_client(redis_url)
    source, sink = MemoryEvents(), MemoryEvents()
    source.relay = RedisStreamsBus(sender).publish_block_change
    relay = asyncio.create_task(RedisStreamsBus(receiver).relay_block_changes(sink))
    try:
        async with sessions(sink) as qs:
            async with asyncio.timeout(10):
                while not await sender.pubsub_numpat():
                    await asyncio.sleep(0.01)
            await changes(source)
            # a notice from an older process has no scope: every session hears of it
            await sender.publish(memory_channel(AGENT), json.dumps({"label": "x", "version": 1}))
            async with asyncio.timeout(10):
                while qs["ben"].qsize() < 2:
                    await asyncio.sleep(0.01)
            got = {who: drained(q) for who, q in qs.items()}
        assert got == {who: [*want, ("x", 1)] for who, want in EXPECTED.items()}
    finally:
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
        await sender.aclose()
        await receiver.aclose()
