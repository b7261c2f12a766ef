"""SQLite: a connection opened while another one holds the write lock waits for it instead of
failing with "database is locked" (the WAL switch used to run on every new connection, and a
journal-mode change does not wait for the busy timeout)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from memory.service import Memory

SCHEMA = {"name": "waits", "parameters": {"type": "object", "properties": {}, "required": []}}


async def test_new_connection_during_a_write_waits(tmp_path: Path) -> None:
    path = tmp_path / "vg.db"
    url = f"sqlite+aiosqlite:///{path}"
    first = await Memory.open(url)  # migrates: the file is put in WAL mode once, here
    await first.close()
    raw = sqlite3.connect(path, isolation_level=None)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    raw.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
    raw.execute("UPDATE alembic_version SET version_num = version_num")
    second = await Memory.open(url, migrate=False)  # fresh pools: new connections
    try:
        release = asyncio.get_running_loop().call_later(0.5, raw.execute, "COMMIT")
        # a read and a write on new connections: the read does not wait (WAL), the write
        # waits for the lock and then succeeds
        assert await second.agents.page(limit=10) == []
        tool, created = await second.tools.upsert(None, "waits", json_schema=SCHEMA)
        release.cancel()
        assert created and (await second.tools.get(tool.id, None, scoped=False)).name == "waits"
    finally:
        await second.close()
        raw.close()
