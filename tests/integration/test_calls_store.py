"""Call records in the database (memory/calls.py, migration 0011) on SQLite and PostgreSQL: the
migration goes up and down and matches the ORM; status changes build the history; an ended
call keeps its outcome; records are scoped to their owner and page newest first."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from memory.calls import CallStore
from memory.db import alembic_config, normalize_url
from memory.models import NotFound
from memory.orm import Base
from memory.service import Memory

TABLE = "calls"


async def _tables(url: str) -> tuple[set[str], list[object]]:
    engine = create_async_engine(normalize_url(url))

    def inspect(conn: sa.Connection) -> tuple[set[str], list[object]]:
        names = set(sa.inspect(conn).get_table_names())
        ctx = MigrationContext.configure(conn)
        with warnings.catch_warnings():  # other tables' expression indexes (SQLite)
            warnings.simplefilter("ignore")
            diffs = [d for d in compare_metadata(ctx, Base.metadata) if f"'{TABLE}'" in repr(d)]
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
    assert diffs == []  # columns, types, indexes and keys as memory/orm/calls.py says
    command.downgrade(cfg, "0010")
    assert TABLE not in asyncio.run(_tables(db_url))[0]
    command.upgrade(cfg, "head")
    assert TABLE in asyncio.run(_tables(db_url))[0]


async def test_records(db_url: str) -> None:
    memory = await Memory.open(db_url)
    try:
        alice, _ = await memory.users.create("alice")
        agent = await memory.agents.create(
            user_id=alice, blocks=[], name="a", model="scripted/demo", system="s", embedding="x"
        )
        store = CallStore(memory.db)
        out = await store.create(
            agent.id,
            user_id=alice,
            direction="outbound",
            transport="twilio",
            status="queued",
            caller="+15551230000",
            options={"first_message": "hi"},
            metadata={"ticket": 7},
        )
        assert out.id.startswith("call-") and out.answered_at is None and not out.ended
        await store.update(out.id, status="ringing", vendor_call_id="CA1")
        live = await store.update(out.id, status="in-progress")
        assert live.answered_at is not None and live.vendor_call_id == "CA1"
        ended = await store.update(out.id, status="completed", end_reason="hung_up_by_api")
        assert ended.ended and ended.end_reason == "hung_up_by_api" and ended.ended_at
        late = await store.update(out.id, status="busy")  # a late callback: history only
        assert (late.status, late.end_reason, late.ended_at) == (
            "completed",
            "hung_up_by_api",
            ended.ended_at,
        )
        assert [h["status"] for h in late.history] == [
            *("queued", "ringing", "in-progress", "completed", "busy")
        ]
        assert (await store.by_vendor_id("CA1")) == late and await store.by_vendor_id("CA2") is None

        inbound = await store.create(
            agent.id, user_id=alice, direction="inbound", transport="browser", status="in-progress"
        )
        assert inbound.answered_at is not None
        busy = await store.create(
            agent.id, user_id=alice, direction="outbound", transport="twilio", status="queued"
        )
        no = await store.update(busy.id, status="no-answer")
        assert (no.end_reason, no.metadata) == ("no_answer", {})

        # owner scope and paging (newest first; after a call id)
        assert await store.get(out.id, user_id=alice, scoped=True) == late
        with pytest.raises(NotFound):
            await store.get(out.id, user_id="user-other", scoped=True)
        assert await store.page(user_id="user-other", scoped=True) == []
        ids = [c.id for c in await store.page(user_id=alice, scoped=True)]
        assert ids == [busy.id, inbound.id, out.id]
        assert [c.id for c in await store.page(after=busy.id, limit=1)] == [inbound.id]
        assert [c.id for c in await store.page(ascending=True, limit=1)] == [out.id]
        assert [c.id for c in await store.page(caller="+15551230000")] == [out.id]
        assert [c.id for c in await store.page(status="in-progress")] == [inbound.id]
        with pytest.raises(NotFound):
            await store.update("call-nope", status="completed")
        # erasing the caller takes their number off their records (of these agents only)
        assert await store.forget_caller("+15551230000", ["agent-other"]) == 0
        assert await store.forget_caller("+15551230000", [agent.id]) == 1
        assert (await store.get(out.id)).caller is None and await store.page(
            caller="+15551230000"
        ) == []
    finally:
        await memory.close()
