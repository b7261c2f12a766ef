"""Per-agent order across sleeptime workers, and parsing of `vg:transcripts` replies.

Redis delivers a stream's entries in order, but two workers may hold entries of the same
memory (`order_of`) at once (one in a backlog, or left by a crashed worker until it is
reclaimed). An entry is applied only when no older entry of the same memory is still pending
in the group (read but not acknowledged by anyone).

`older_pending` answers that from a snapshot of the group's pending entries (XPENDING pages,
the order key of each entry fetched once with XRANGE and cached) shared by every check. Once an
entry has been delivered, the older entries pending in the group can only go away (XREADGROUP
delivers in order; a reclaim keeps an entry pending), so a snapshot taken after an entry's
delivery can only be wrong towards "still pending": the entry waits until a newer snapshot,
never runs early. A snapshot is taken at most every `max_age_s`. Before, every check of every
agent's next entry scanned up to 1,000 pending entries itself: with a backlog (two workers
holding ~1,000 entries of 500 agents at 400-500 calls) the workers spent most of a core on
those scans and fell further behind (issue 20; tests/integration/test_stream_order.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
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


def order_of(fields: dict[Any, Any]) -> str:
    """Whose memory an entry changes, the unit applied in stream order: its agent, or
    "agent/caller" for a caller of a shared agent (each caller's memory is their own, so two
    callers' turns may be applied at once; an agent-wide block edited by both is written with
    compare-and-set, and the later rewrite redone). "" when the entry is not a transcript
    event."""
    raw = fields.get(b"event", fields.get("event"))
    if raw is None:
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    agent = data.get("agent_id") if isinstance(data, dict) else None
    if not isinstance(agent, str):
        return ""
    caller = data.get("identity_id")
    return f"{agent}/{caller}" if isinstance(caller, str) and caller else agent


def order_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable key (\"1700000000000-3\" -> (1700000000000, 3))."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class _Snapshot:
    taken_at: float  # monotonic time the XPENDING scan began
    oldest: dict[str, tuple[int, int]]  # order key -> its oldest pending entry


class StreamOrder:
    def __init__(
        self,
        redis: Any,
        *,
        cache_size: int = 50_000,
        page: int = 1000,
        max_age_s: float = 0.05,
    ) -> None:
        self.redis = redis
        self.cache_size = cache_size
        self.page = page
        self.max_age_s = max_age_s
        self._keys: OrderedDict[str, str] = OrderedDict()
        self._seen: dict[str, float] = {}  # entry id -> when this worker was handed it
        self._snapshot: _Snapshot | None = None
        self._scanning: asyncio.Task[_Snapshot] | None = None
        self.scans = 0  # XPENDING snapshots taken (for tests and benchmarks)

    def remember(self, entry_id: str, key: str, *, delivered: bool = True) -> None:
        """`entry_id`'s order key (`order_of`); `delivered`: it was just handed to this worker."""
        self._keys[entry_id] = key
        if len(self._keys) > self.cache_size:
            self._keys.popitem(last=False)
        if delivered:
            self._seen[entry_id] = time.monotonic()

    def forget(self, entry_id: str) -> None:
        """This worker no longer holds `entry_id` (applied, dead-lettered or handed back)."""
        self._seen.pop(entry_id, None)

    async def older_pending(self, entry_id: str, key: str) -> bool:
        """Is an entry of the same order key (`order_of`) older than `entry_id` pending in the
        group?"""
        seen = self._seen.get(entry_id, time.monotonic())
        snap = self._snapshot
        if (
            snap is None
            or snap.taken_at <= seen
            or time.monotonic() - snap.taken_at > self.max_age_s
        ):
            snap = await self._fresh(seen)
        oldest = snap.oldest.get(key)
        return oldest is not None and oldest < order_key(entry_id)

    async def _fresh(self, after: float) -> _Snapshot:
        """A snapshot begun after `after`, shared with every check waiting at the same time."""
        while True:
            task = self._scanning
            if task is None or task.done():
                task = self._scanning = asyncio.create_task(self._scan())
            snap = await asyncio.shield(task)
            if snap.taken_at > after:
                return snap

    async def _scan(self) -> _Snapshot:
        taken_at = time.monotonic()
        self.scans += 1
        ids: list[str] = []
        start = "-"
        while True:
            rows = await self.redis.xpending_range(
                STREAM, GROUP, min=start, max="+", count=self.page
            )
            ids += [decode(r["message_id"]) for r in rows]
            if len(rows) < self.page:
                break
            start = f"({ids[-1]}"
        keys = {i: self._keys[i] for i in ids if i in self._keys}
        unknown = [i for i in ids if i not in keys]
        if unknown:
            async with self.redis.pipeline(transaction=False) as pipe:
                for i in unknown:
                    pipe.xrange(STREAM, i, i)
                found = await pipe.execute()
            for i, got in zip(unknown, found, strict=True):
                keys[i] = order_of(got[0][1]) if got else ""
                self.remember(i, keys[i], delivered=False)
        oldest: dict[str, tuple[int, int]] = {}
        for i in ids:  # in stream order: a key's first is its oldest
            if keys[i] and keys[i] not in oldest:
                oldest[keys[i]] = order_key(i)
        snap = self._snapshot = _Snapshot(taken_at, oldest)
        return snap
