"""Tool names are unique per owner even under concurrent writers (two gateway processes on one
PostgreSQL, or two requests at once): one create wins, the other is a clean 409; concurrent
PUTs converge on one row."""

from __future__ import annotations

import asyncio

import pytest

from memory.models import Conflict
from memory.service import Memory

SCHEMA = {"name": "twin", "parameters": {"type": "object", "properties": {}, "required": []}}


async def test_concurrent_creates_of_one_name(db_url: str) -> None:
    # two Memory instances: two connection pools, as two gateway processes would have
    a, b = await Memory.open(db_url), await Memory.open(db_url, migrate=False)
    try:
        for round_ in range(5):
            name = f"twin_{round_}"
            results = await asyncio.gather(
                *(
                    m.tools.upsert(None, name, create_only=True, json_schema=SCHEMA)
                    for m in (a, b, a, b)
                ),
                return_exceptions=True,
            )
            created = [r for r in results if not isinstance(r, BaseException)]
            assert len(created) == 1, results
            assert all(isinstance(r, Conflict) for r in results if r not in created), results
            rows = [t for t in await a.tools.page(None, limit=1000) if t.name == name]
            assert len(rows) == 1

        puts = await asyncio.gather(
            *(m.tools.upsert(None, "shared", json_schema=SCHEMA) for m in (a, b, a, b))
        )
        assert len({t.id for t, _ in puts}) == 1
        assert sum(created for _, created in puts) == 1
        # a rename onto a taken name is a conflict, the taken tool untouched
        other, _ = await a.tools.upsert(None, "other", json_schema=SCHEMA)
        with pytest.raises(Conflict):
            await b.tools.update(other.id, name="shared")
        assert {t.name for t in await a.tools.page(None, limit=1000)} >= {"shared", "other"}
    finally:
        await a.close()
        await b.close()
