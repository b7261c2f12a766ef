"""Several processes starting at once on one fresh database migrate it exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import asyncio, sys
from memory.db import Database
async def main():
    db = Database(sys.argv[1])
    await db.migrate()
    await db.close()
asyncio.run(main())
"""


def test_concurrent_first_migrations_all_succeed(db_url: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, db_url],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [(p.wait(120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(rc == 0 for rc, _ in results), results

    import asyncio

    from sqlalchemy import text

    from memory.db import Database

    async def heads() -> list[str]:
        db = Database(db_url)
        async with db.read() as s:
            rows = (await s.execute(text("SELECT version_num FROM alembic_version"))).all()
        await db.close()
        return [r[0] for r in rows]

    from alembic.script import ScriptDirectory

    from memory.db import alembic_config

    head = ScriptDirectory.from_config(alembic_config(db_url)).get_current_head()
    assert asyncio.run(heads()) == [head]
