"""Transcript outbox: finished turns, written in the same transaction as their messages."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, timedelta

from sqlalchemy import func, select, update

from memory.db import Database
from memory.models import TranscriptEvent
from memory.orm import Outbox, ProcessedEvent, utcnow
from memory.raw import Stmt

_INSERT = (
    "INSERT INTO outbox (event_id, agent_id, identity_id, conversation_id, payload, created_at, "
    "attempts) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_PENDING = "SELECT id, payload FROM outbox WHERE sent_at IS NULL ORDER BY id LIMIT ?"


class OutboxStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.on_added: Callable[[], None] | None = None  # wakes the publisher

    def added(self) -> None:
        """Call after the transaction that added rows committed."""
        if self.on_added is not None:
            self.on_added()

    @staticmethod
    def insert(event: TranscriptEvent) -> Stmt:
        """The row to add in the transaction that stores the turn (`Database.batch`); call
        `added()` once it committed."""
        payload = event.model_dump(mode="json")
        return Stmt(
            _INSERT,
            (
                event.event_id,
                event.agent_id,
                event.identity_id,
                event.conversation_id,
                payload,
                utcnow(),
                0,
            ),
        )

    async def pending(self, limit: int = 500) -> list[tuple[int, TranscriptEvent]]:
        """The oldest unsent rows. Straight to the driver (memory.raw), as `mark_sent`: the
        publisher runs both on the event loop for every drain, and an ORM session is a thread
        hop per statement step on SQLite (aiosqlite); this is a read on the loop's thread and
        a write in one hop (issue 20: with agents.bus's drain spacing and the sleeptime batch,
        the bus went from ~4 ms of main-thread CPU per turn to under 1 ms, docs/benchmarks.md).
        """
        (rows,) = await self.db.batch([Stmt(_PENDING, (limit,), returns=True)])
        # JSON comes as text from SQLite, parsed from PostgreSQL (in no set order)
        parse = json.loads if self.db.is_sqlite else None
        events = [
            (
                int(r["id"]),
                TranscriptEvent.model_validate(parse(r["payload"]) if parse else r["payload"]),
            )
            for r in rows
        ]
        return sorted(events, key=lambda pair: pair[0])

    async def mark_sent(self, ids: list[int]) -> None:
        if not ids:
            return
        marks = ", ".join("?" * len(ids))
        sql = f"UPDATE outbox SET sent_at = ? WHERE id IN ({marks})"
        await self.db.batch([Stmt(sql, (utcnow(), *ids))], write=True)

    async def requeue_unprocessed(self, horizon_s: float) -> int:
        """Mark rows sent within `horizon_s` whose events no worker recorded as unsent again
        (the bus lost them, e.g. Redis restarted without persistence). Returns how many."""
        since = utcnow() - timedelta(seconds=horizon_s)
        processed = select(ProcessedEvent.event_id).where(
            ProcessedEvent.event_id == Outbox.event_id
        )
        async with self.db.write() as s:
            res = await s.execute(
                update(Outbox)
                .where(Outbox.sent_at.is_not(None), Outbox.sent_at > since, ~processed.exists())
                .values(sent_at=None, attempts=Outbox.attempts + 1)
                .execution_options(synchronize_session=False)
            )
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

    async def depth(self) -> int:
        async with self.db.read() as s:
            q = select(func.count()).select_from(Outbox).where(Outbox.sent_at.is_(None))
            return int(await s.scalar(q) or 0)

    async def backlog(self) -> tuple[int, float]:
        """(unsent turns, age in seconds of the oldest unsent one; 0 when none)."""
        async with self.db.read() as s:
            q = select(func.count(), func.min(Outbox.created_at)).where(Outbox.sent_at.is_(None))
            count, oldest = (await s.execute(q)).one()
        if not count or oldest is None:
            return 0, 0.0
        if oldest.tzinfo is None:  # SQLite aggregates bypass the column type
            oldest = oldest.replace(tzinfo=UTC)
        return int(count), max(0.0, (utcnow() - oldest).total_seconds())
