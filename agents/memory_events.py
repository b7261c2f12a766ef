"""Block-change notifications fanned out to live sessions (in-process; the Redis pub/sub
relay in agents.bus forwards `vg:memory:{agent_id}` messages into the same hub)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BlockChanged:
    agent_id: str
    label: str
    version: int


Relay = Callable[[BlockChanged], Awaitable[None]]


class MemoryEvents:
    def __init__(self, queue_size: int = 64) -> None:
        self._subs: dict[str, set[asyncio.Queue[BlockChanged]]] = {}
        self.queue_size = queue_size
        self.relay: Relay | None = None  # e.g. publish to Redis for other instances

    async def changed(self, agent_id: str, label: str, version: int) -> None:
        """Called after a block write commits in this process."""
        event = BlockChanged(agent_id, label, version)
        self.deliver(event)
        if self.relay is not None:
            try:
                await self.relay(event)
            except Exception:
                log.warning("could not relay block change %s", event, exc_info=True)

    def deliver(self, event: BlockChanged) -> None:
        """Hand an event to this process's subscribers (also used by the Redis relay)."""
        for q in self._subs.get(event.agent_id, ()):
            if q.full():
                q.get_nowait()  # a slow consumer loses the oldest notice, not the newest
            q.put_nowait(event)

    @asynccontextmanager
    async def subscribe(self, agent_id: str) -> AsyncIterator[asyncio.Queue[BlockChanged]]:
        q: asyncio.Queue[BlockChanged] = asyncio.Queue(self.queue_size)
        self._subs.setdefault(agent_id, set()).add(q)
        try:
            yield q
        finally:
            subs = self._subs.get(agent_id)
            if subs is not None:
                subs.discard(q)
                if not subs:
                    del self._subs[agent_id]
