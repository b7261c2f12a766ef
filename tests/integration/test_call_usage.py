"""Call minutes in the database (memory/usage.py): the per-call flush is one raw upsert, on
SQLite and PostgreSQL; concurrent flushes of one identity add up, days and identities stay
apart, a negative figure adds nothing."""

from __future__ import annotations

import asyncio

from memory.db import Database
from memory.usage import UsageStore


async def _flushes(url: str) -> tuple[list[float], float, float, float, float]:
    db = Database(url)
    await db.migrate()
    try:
        usage = UsageStore(db)
        first = [await usage.add_call_seconds("user:a", 1.5, "2026-11-25")]
        # 20 calls of one identity flushing at once: no update lost
        first += await asyncio.gather(
            *(usage.add_call_seconds("user:a", 0.25, "2026-11-25") for _ in range(20))
        )
        other_day = await usage.add_call_seconds("user:a", 2.0, "2026-11-26")
        other_user = await usage.add_call_seconds("user:b", 3.0, "2026-11-25")
        negative = await usage.add_call_seconds("user:a", -9.0, "2026-11-25")
        stored = await usage.call_seconds("user:a", "2026-11-25")
        return first, other_day, other_user, negative, stored
    finally:
        await db.close()


def test_call_seconds_add_up_per_identity_and_day(db_url: str) -> None:
    first, other_day, other_user, negative, stored = asyncio.run(_flushes(db_url))
    assert first[0] == 1.5  # the first flush creates the row and returns its total
    assert max(first) == 1.5 + 20 * 0.25  # each flush returns the new total
    assert sorted(first) == [1.5 + 0.25 * i for i in range(21)]
    assert other_day == 2.0 and other_user == 3.0
    assert negative == stored == 6.5
