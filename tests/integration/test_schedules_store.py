"""Scheduled messages in the database (memory/schedules.py, migration 0010) on SQLite and
PostgreSQL: the migration goes up and down and matches the ORM; a due firing claimed by several
processes at once is won by exactly one."""

from __future__ import annotations

import asyncio
import warnings
from datetime import timedelta

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from memory.db import Database, alembic_config, normalize_url
from memory.ids import utcnow
from memory.orm import Base
from memory.schedules import ScheduleStore
from memory.service import Memory

TABLE = "scheduled_messages"
MESSAGE = {"messages": [{"role": "user", "content": "ping"}]}


async def _tables(url: str) -> tuple[set[str], list[object]]:
    engine = create_async_engine(normalize_url(url))

    def inspect(conn: sa.Connection) -> tuple[set[str], list[object]]:
        names = set(sa.inspect(conn).get_table_names())
        ctx = MigrationContext.configure(conn)
        with warnings.catch_warnings():  # other tables' expression indexes (SQLite)
            warnings.simplefilter("ignore")
            diffs = [d for d in compare_metadata(ctx, Base.metadata) if TABLE in repr(d)]
        return names, diffs

    async with engine.connect() as conn:
        out = await conn.run_sync(inspect)
    await engine.dispose()
    return out


def test_migration_up_down_and_matches_the_orm(db_url: str) -> None:
    cfg = alembic_config(normalize_url(db_url))
    command.upgrade(cfg, "head")
    names, diffs = asyncio.run(_tables(db_url))
    assert TABLE in names
    assert diffs == []  # columns, types, indexes and keys as memory/orm/schedules.py says
    command.downgrade(cfg, "0009")
    assert TABLE not in asyncio.run(_tables(db_url))[0]
    command.upgrade(cfg, "head")
    assert TABLE in asyncio.run(_tables(db_url))[0]


async def _race(url: str, rows: int, claimants: int) -> list[int]:
    memory = await Memory.open(url)
    agent = await memory.agents.create(
        user_id=None, blocks=[], name="sched", model="scripted/demo", system="s", embedding="x"
    )
    dbs = [Database(url) for _ in range(claimants)]  # as many processes' engines
    stores = [ScheduleStore(db) for db in dbs]
    now = utcnow()
    try:
        for i in range(rows):
            kind = {"cron_expression": "* * * * *"} if i % 2 else {"scheduled_at": 1.0}
            await stores[0].create(
                agent.id, message=MESSAGE, next_run_at=now - timedelta(seconds=1), **kind
            )
        due = [await s.due(now) for s in stores]  # every process sees every row due
        assert all(len(d) == rows for d in due)
        wins = [0] * rows
        for i in range(rows):
            results = await asyncio.gather(
                *(
                    s.claim(d[i], None if d[i].kind == "one-time" else now + timedelta(minutes=1))
                    for s, d in zip(stores, due, strict=True)
                )
            )
            wins[i] = sum(results)
        # claimed: one-time rows are gone, recurring ones wait for their next time
        left = await stores[0].due(now + timedelta(minutes=2))
        assert [s.kind for s in left] == ["recurring"] * (rows // 2)
        assert all(s.version == 1 for s in left)
        assert await stores[0].due(now) == []
        return wins
    finally:
        for db in dbs:
            await db.close()
        await memory.close()


def test_a_due_firing_is_claimed_once(db_url: str) -> None:
    assert asyncio.run(_race(db_url, rows=10, claimants=4)) == [1] * 10
