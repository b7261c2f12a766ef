"""Block-change notifications fanned out to live sessions (in-process; the Redis pub/sub
relay in transcripts.bus forwards `vg:memory:{agent_id}` messages into the same hub).

A change reaches only the sessions that see the block: a caller's own copy of a caller-scoped
block, that caller's sessions; the caller-scoped template, the sessions without a caller (the
only ones that read it); any other block, every session of the agent. Before, every session of
the agent heard of every caller's rewrite: on one agent with 500 callers, each rewrite sent
`memory.updated` to 500 sockets, and told each caller when another caller's memory changed."""

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
    scope: str = "agent"  # the block's scope (memory.models.BlockScope)
    identity_id: str | None = None  # whose copy, for a caller-scoped block (None: the template)

    @property
    def for_everyone(self) -> bool:
        """Every session of the agent sees the block (else: only `identity_id`'s sessions)."""
        return self.scope != "caller"


Relay = Callable[[BlockChanged], Awaitable[None]]


class MemoryEvents:
    def __init__(self, queue_size: int = 64) -> None:
        # agent id -> caller key (None: sessions without a caller) -> the sessions' queues
        self._subs: dict[str, dict[str | None, set[asyncio.Queue[BlockChanged]]]] = {}
        self.queue_size = queue_size
        self.relay: Relay | None = None  # e.g. publish to Redis for other instances

    async def changed(
        self,
        agent_id: str,
        label: str,
        version: int,
        scope: str = "agent",
        identity_id: str | None = None,
    ) -> None:
        """Called after a block write commits in this process."""
        event = BlockChanged(agent_id, label, version, scope, identity_id)
        self.deliver(event)
        if self.relay is not None:
            try:
                await self.relay(event)
            except Exception:
                log.warning("could not relay block change %s", event, exc_info=True)

    def deliver(self, event: BlockChanged) -> None:
        """Hand an event to this process's subscribers that see the block (also used by the
        Redis relay)."""
        by_caller = self._subs.get(event.agent_id)
        if not by_caller:
            return
        if event.for_everyone:
            groups = list(by_caller.values())
        else:
            groups = [by_caller.get(event.identity_id, set())]
        for queues in groups:
            for q in queues:
                if q.full():
                    q.get_nowait()  # a slow consumer loses the oldest notice, not the newest
                q.put_nowait(event)

    @asynccontextmanager
    async def subscribe(
        self, agent_id: str, identity_id: str | None = None
    ) -> AsyncIterator[asyncio.Queue[BlockChanged]]:
        """Changes of the blocks a session of `agent_id` sees, as the caller `identity_id`
        (None: a session without a caller)."""
        q: asyncio.Queue[BlockChanged] = asyncio.Queue(self.queue_size)
        by_caller = self._subs.setdefault(agent_id, {})
        by_caller.setdefault(identity_id, set()).add(q)
        try:
            yield q
        finally:
            queues = by_caller.get(identity_id)
            if queues is not None:
                queues.discard(q)
                if not queues:
                    del by_caller[identity_id]
            if not by_caller and self._subs.get(agent_id) is by_caller:
                del self._subs[agent_id]
