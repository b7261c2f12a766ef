"""Per-agent order across sleeptime workers, and parsing of `vg:transcripts` replies.

Redis delivers a stream's entries in order, but two workers may hold entries of the same
agent at once (one in a backlog, or left by a crashed worker until it is reclaimed). An entry
is applied only when no older entry of the same agent is still pending in the group (read
but not acknowledged by anyone); `older_pending` answers that from XPENDING, fetching the
agent of entries held by other workers once (XRANGE) and caching it."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from agents.bus import GROUP, STREAM

Entry = tuple[str, dict[Any, Any]]


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def entries(reply: Any) -> list[Entry]:
    """XREADGROUP replies: RESP2 [[stream, [(id, fields)]]] or RESP3 {stream: [[id, fields]]}."""
    if not reply:
        return []
    streams = reply.items() if isinstance(reply, dict) else reply
    out: list[Entry] = []
    for _name, items in streams:
        for entry_id, fields in items or []:
            out.append((decode(entry_id), fields or {}))
    return out


def agent_of(fields: dict[Any, Any]) -> str:
    """The agent an entry is about ("" when the entry is not a transcript event)."""
    raw = fields.get(b"event", fields.get("event"))
    if raw is None:
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    agent = data.get("agent_id") if isinstance(data, dict) else None
    return agent if isinstance(agent, str) else ""


class StreamOrder:
    def __init__(self, redis: Any, *, cache_size: int = 50_000, scan: int = 1000) -> None:
        self.redis = redis
        self.cache_size = cache_size
        self.scan = scan
        self._agents: OrderedDict[str, str] = OrderedDict()

    def remember(self, entry_id: str, agent_id: str) -> None:
        self._agents[entry_id] = agent_id
        if len(self._agents) > self.cache_size:
            self._agents.popitem(last=False)

    async def older_pending(self, entry_id: str, agent_id: str) -> bool:
        """Is an entry of `agent_id` older than `entry_id` pending in the group?"""
        summary = await self.redis.xpending(STREAM, GROUP)
        if not summary or not summary.get("pending") or decode(summary["min"]) == entry_id:
            return False  # nothing older is pending (the common case: one round trip)
        rows = await self.redis.xpending_range(
            STREAM, GROUP, min="-", max=f"({entry_id}", count=self.scan
        )
        ids = [decode(r["message_id"]) for r in rows]
        unknown = [i for i in ids if i not in self._agents]
        if unknown:
            async with self.redis.pipeline(transaction=False) as pipe:
                for i in unknown:
                    pipe.xrange(STREAM, i, i)
                found = await pipe.execute()
            for i, got in zip(unknown, found, strict=True):
                self.remember(i, agent_of(got[0][1]) if got else "")
        return any(self._agents.get(i) == agent_id for i in ids)
