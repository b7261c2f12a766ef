"""Quota state in the database: per-user limit overrides and call seconds per identity and UTC
day. Increments are atomic upserts, so several gateway instances on one database (PostgreSQL)
count the same totals, and a restart forgets nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from memory.db import Database
from memory.models import NotFound
from memory.orm import CallUsage, User, UserLimits, utcnow


@dataclass(frozen=True, slots=True)
class LimitOverrides:
    """A user's own limits; None: the server default applies."""

    rps: float | None = None
    burst: int | None = None
    max_calls: int | None = None
    call_minutes: float | None = None


def utc_day(now: datetime | None = None) -> str:
    return (now or utcnow()).strftime("%Y-%m-%d")


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def _insert(self) -> Any:
        """INSERT ... ON CONFLICT DO UPDATE exists in both dialects (SQLite, PostgreSQL)."""
        from sqlalchemy.dialects import postgresql, sqlite

        return sqlite.insert if self.db.is_sqlite else postgresql.insert

    async def add_call_seconds(
        self, identity: str, seconds: float, day: str | None = None
    ) -> float:
        """Add `seconds` to the identity's day and return the day's new total."""
        day = day or utc_day()
        stmt = self._insert()(CallUsage).values(
            identity=identity, day=day, seconds=max(0.0, seconds), updated_at=utcnow()
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["identity", "day"],
            set_={
                "seconds": CallUsage.seconds + stmt.excluded.seconds,
                "updated_at": stmt.excluded.updated_at,
            },
        )
        async with self.db.write() as s:
            await s.execute(stmt)
            total = await s.scalar(
                select(CallUsage.seconds).where(
                    CallUsage.identity == identity, CallUsage.day == day
                )
            )
        return float(total or 0.0)

    async def call_seconds(self, identity: str, day: str | None = None) -> float:
        async with self.db.read() as s:
            total = await s.scalar(
                select(CallUsage.seconds).where(
                    CallUsage.identity == identity, CallUsage.day == (day or utc_day())
                )
            )
        return float(total or 0.0)

    async def limits(self, user_id: str) -> LimitOverrides:
        async with self.db.read() as s:
            row = await s.get(UserLimits, user_id)
        if row is None:
            return LimitOverrides()
        return LimitOverrides(row.rps, row.burst, row.max_calls, row.call_minutes)

    async def set_limits(self, user_id: str, limits: LimitOverrides) -> LimitOverrides:
        """Store a user's overrides; fields left None keep their stored value."""
        async with self.db.write() as s:
            if await s.get(User, user_id) is None:
                raise NotFound("user", user_id)
            row = await s.get(UserLimits, user_id)
            if row is None:
                row = UserLimits(user_id=user_id)
                s.add(row)
            for name in ("rps", "burst", "max_calls", "call_minutes"):
                value = getattr(limits, name)
                if value is not None:
                    setattr(row, name, value)
            row.updated_at = utcnow()
            out = LimitOverrides(row.rps, row.burst, row.max_calls, row.call_minutes)
        return out
