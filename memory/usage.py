"""Quota state in the database: per-user limit overrides and call seconds per identity and UTC
day. Increments are atomic upserts, so several gateway instances on one database (PostgreSQL)
count the same totals, and a restart forgets nothing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from memory.db import Database
from memory.ids import utcnow
from memory.models import NotFound
from memory.orm import CallUsage, User, UserLimits
from memory.raw import Stmt


@dataclass(frozen=True, slots=True)
class LimitOverrides:
    """A user's own limits; None: the server default applies."""

    rps: float | None = None
    burst: int | None = None
    max_calls: int | None = None
    call_minutes: float | None = None


_ADD = (
    "INSERT INTO call_usage (identity, day, seconds, updated_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (identity, day) DO UPDATE "
    "SET seconds = call_usage.seconds + excluded.seconds, updated_at = excluded.updated_at "
    "RETURNING seconds"
)


def utc_day(now: datetime | None = None) -> str:
    return (now or utcnow()).strftime("%Y-%m-%d")


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def add_call_seconds(
        self, identity: str, seconds: float, day: str | None = None
    ) -> float:
        """Add `seconds` to the identity's day and return the day's new total: one upsert
        with RETURNING straight on the driver (memory.raw). Every call flushes its minutes
        every VG_QUOTA_FLUSH_S; through the ORM each flush built a new statement (the upsert's
        `excluded` alias, its columns and binds), ~30 objects left for the cyclic garbage
        collector per flush (bench/voice_concurrency.py, VG_BENCH_GARBAGE=1)."""
        rows = await self.db.batch(
            [Stmt(_ADD, (identity, day or utc_day(), max(0.0, seconds), utcnow()), True)],
            write=True,
        )
        return float(rows[0][0]["seconds"] if rows[0] else 0.0)

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
