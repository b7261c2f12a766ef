"""Scheduled messages: create, read, page, delete, and the due firings' claim.

Several gateways (workers, instances) poll one database for due schedules. A firing is
claimed with one conditional statement on the row's `version` as read: a one-time schedule is
deleted, a recurring one's `next_run_at` moved on and its version raised. On SQLite the write
lock serialises the claims; on PostgreSQL the second UPDATE waits for the first one's row lock
and then matches no row. Either way exactly one claimant sees a row changed and fires it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update

from memory.db import Database
from memory.ids import new_id
from memory.models import NotFound, _Model
from memory.orm import ScheduledMessage

KIND = "scheduled message"


class ScheduleData(_Model):
    id: str
    agent_id: str
    kind: str  # "one-time" | "recurring"
    scheduled_at: float | None
    cron_expression: str | None
    message: dict[str, Any]
    next_run_at: datetime
    version: int


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        agent_id: str,
        *,
        message: dict[str, Any],
        next_run_at: datetime,
        scheduled_at: float | None = None,
        cron_expression: str | None = None,
    ) -> ScheduleData:
        row = ScheduledMessage(
            id=new_id("scheduled_message"),
            agent_id=agent_id,
            kind="recurring" if cron_expression is not None else "one-time",
            scheduled_at=scheduled_at,
            cron_expression=cron_expression,
            message=message,
            next_run_at=next_run_at,
            version=0,
        )
        async with self.db.write() as s:
            s.add(row)
        return ScheduleData.model_validate(row)

    async def get(self, agent_id: str, schedule_id: str) -> ScheduleData:
        async with self.db.read() as s:
            row = await s.scalar(
                select(ScheduledMessage).where(
                    ScheduledMessage.id == schedule_id, ScheduledMessage.agent_id == agent_id
                )
            )
        if row is None:
            raise NotFound(KIND, schedule_id)
        return ScheduleData.model_validate(row)

    async def page(
        self, agent_id: str, *, after: str | None, limit: int
    ) -> tuple[list[ScheduleData], bool]:
        """The agent's schedules in creation order after the one named `after`, and whether
        more follow."""
        q = select(ScheduledMessage).where(ScheduledMessage.agent_id == agent_id)
        async with self.db.read() as s:
            if after is not None:
                seq = await s.scalar(
                    select(ScheduledMessage.seq).where(
                        ScheduledMessage.id == after, ScheduledMessage.agent_id == agent_id
                    )
                )
                if seq is None:
                    raise NotFound(KIND, after)
                q = q.where(ScheduledMessage.seq > seq)
            rows = list(await s.scalars(q.order_by(ScheduledMessage.seq).limit(limit + 1)))
        return [ScheduleData.model_validate(r) for r in rows[:limit]], len(rows) > limit

    async def delete(self, agent_id: str, schedule_id: str) -> None:
        async with self.db.write() as s:
            res = await s.execute(
                delete(ScheduledMessage).where(
                    ScheduledMessage.id == schedule_id, ScheduledMessage.agent_id == agent_id
                )
            )
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound(KIND, schedule_id)

    async def due(self, now: datetime, limit: int = 100) -> list[ScheduleData]:
        """Schedules due at `now`, the longest overdue first."""
        async with self.db.read() as s:
            rows = await s.scalars(
                select(ScheduledMessage)
                .where(ScheduledMessage.next_run_at <= now)
                .order_by(ScheduledMessage.next_run_at)
                .limit(limit)
            )
            return [ScheduleData.model_validate(r) for r in rows]

    async def claim(self, schedule: ScheduleData, next_run_at: datetime | None) -> bool:
        """Take the due firing of `schedule` as read: delete it (`next_run_at` None: it ends
        here) or move it to `next_run_at`. True for exactly one claimant; False when another
        process took it first, or it was deleted meanwhile."""
        same = (ScheduledMessage.id == schedule.id) & (ScheduledMessage.version == schedule.version)
        async with self.db.write() as s:
            if next_run_at is None:
                res = await s.execute(delete(ScheduledMessage).where(same))
            else:
                res = await s.execute(
                    update(ScheduledMessage)
                    .where(same)
                    .values(next_run_at=next_run_at, version=schedule.version + 1)
                )
            return bool(res.rowcount)  # type: ignore[attr-defined]
