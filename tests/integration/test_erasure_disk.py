"""Erasure leaves the disk at once (memory/scrub.py): right after `DELETE /v1/identities/{id}`
no byte of the SQLite files (database, -wal, -shm) holds the erased caller's words or number,
and on PostgreSQL every table they were in has been vacuumed, no dead tuple of theirs left.
The other caller's words stay."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from memory.db import sqlite_path
from memory.raw import configure_sqlite
from memory.scrub import ERASED_TABLES, checkpoint
from tests.support.servers import ServerThread
from tests.support.services import drop_postgres_database, postgres_database

WORD_A, WORD_B = "quixotrombone", "zephyrmandolin"
KEY_A, KEY_B = "+15550003333", "+15550004444"
LONG = " la" * 1500  # a message longer than a page: its text lies in overflow pages
TURNS = 4


def _fill(gw: ServerThread) -> dict[str, str]:
    """Two callers of one agent, their turns taken in turn (their rows share pages), with a
    long message, their own block corrected over REST and an archival passage, all naming
    their word. Their identity ids by key."""
    http = httpx.Client(base_url=gw.url, timeout=60)
    agent = http.post("/v1/agents/", json={"model": "openai/fake"}).json()
    callers = ((KEY_A, WORD_A), (KEY_B, WORD_B))
    convs = {
        key: http.post(f"/v1/conversations/?agent_id={agent['id']}", json={"caller": key}).json()
        for key, _ in callers
    }
    for n in range(TURNS):
        for key, word in callers:
            text = f"and {word}{LONG}" if n == 1 else f"remember {word} {n}"
            r = http.post(
                f"/v1/conversations/{convs[key]['id']}/messages",
                json={"input": text, "streaming": False},
            )
            assert r.status_code == 200, r.text
    idents = {key: conv["identity_id"] for key, conv in convs.items()}
    for key, word in callers:
        (human,) = http.get(f"/v1/identities/{idents[key]}").json()["block_ids"]
        r = http.patch(f"/v1/blocks/{human}", json={"value": f"Caller likes {word}"})
        assert r.status_code == 200, r.text

    async def passages() -> None:
        archival = gw.app.state.gw.memory.archival
        for key, word in callers:
            await archival.insert(agent["id"], [f"fact: {word}"], identity_id=idents[key])

    gw.call(passages())
    http.close()
    return idents


def _erase(gw: ServerThread, identity_id: str) -> None:
    r = httpx.delete(f"{gw.url}/v1/identities/{identity_id}", timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["erased"]["messages"] >= 2 * TURNS


def _disk(db: Path) -> bytes:
    """The raw bytes of the database file, its write-ahead log and its shared-memory index."""
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def test_sqlite_files_hold_no_erased_word(
    gateway_factory: Any, sqlite_url: str, fake_llm_url: str
) -> None:
    gw: ServerThread = gateway_factory(
        database_url=sqlite_url, openai_base_url=fake_llm_url, openai_api_key="t"
    )
    idents = _fill(gw)
    db = Path(sqlite_path(sqlite_url))
    before = _disk(db)
    # the test can see them
    assert before.count(WORD_A.encode()) >= 2 * TURNS and KEY_A.encode() in before

    _erase(gw, idents[KEY_A])

    after = _disk(db)
    assert after.count(WORD_A.encode()) == 0
    assert after.count(KEY_A.encode()) == 0
    assert after.count(WORD_B.encode()) >= 2 * TURNS and KEY_B.encode() in after


def test_every_sqlite_connection_zeroes_what_it_deletes(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    conn.execute("PRAGMA secure_delete=OFF")  # what several SQLite builds default to
    configure_sqlite(conn)
    assert conn.execute("PRAGMA secure_delete").fetchone() == (1,)
    conn.close()


def test_a_busy_checkpoint_is_retried_then_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "x.db")
    writer = sqlite3.connect(path, isolation_level=None)
    configure_sqlite(writer)
    writer.execute("CREATE TABLE t (v TEXT)")
    writer.execute("INSERT INTO t VALUES ('one')")
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT v FROM t").fetchall() == [("one",)]  # a snapshot held open
    writer.execute("INSERT INTO t VALUES ('two')")  # a frame the reader does not see

    caplog.set_level(logging.WARNING, logger="memory.scrub")
    assert checkpoint(path, tries=2, wait_s=0.05) is False
    assert "checkpoint stayed busy (2 tries" in caplog.text
    assert os.path.getsize(f"{path}-wal") > 0

    reader.execute("COMMIT")
    assert checkpoint(path, tries=2, wait_s=0.05) is True
    assert os.path.getsize(f"{path}-wal") == 0
    reader.close()
    writer.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    made = postgres_database()
    if made is None:
        pytest.skip("set VG_TEST_POSTGRES_URL (scripts/test does when PostgreSQL answers)")
    url, admin = made
    try:
        yield url
    finally:
        drop_postgres_database(url, admin)


async def _pg(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


def _vacuums(url: str) -> dict[str, int]:
    rows = asyncio.run(_pg(url, "SELECT relname, vacuum_count FROM pg_stat_user_tables"))
    return {r["relname"]: int(r["vacuum_count"]) for r in rows}


def test_postgres_tables_are_vacuumed(pg_url: str, gateway_factory: Any, fake_llm_url: str) -> None:
    gw: ServerThread = gateway_factory(
        database_url=pg_url, openai_base_url=fake_llm_url, openai_api_key="t"
    )
    idents = _fill(gw)
    asyncio.run(_pg(pg_url, "CREATE EXTENSION IF NOT EXISTS pgstattuple"))
    vacuumed = _vacuums(pg_url)

    _erase(gw, idents[KEY_A])

    def holding(word: str) -> int:
        sql = "SELECT count(*) AS n FROM messages WHERE content LIKE $1"
        return int(asyncio.run(_pg(pg_url, sql, f"%{word}%"))[0]["n"])

    assert holding(WORD_A) == 0 and holding(WORD_B) >= 2 * TURNS
    now = _vacuums(pg_url)
    assert {t: now[t] - vacuumed.get(t, 0) for t in ERASED_TABLES} == dict.fromkeys(
        ERASED_TABLES, 1
    )
    # pgstattuple reads the pages themselves: pg_stat_user_tables' n_dead_tup also counts the
    # DELETE's dead tuples when the deleting connection reports them after VACUUM did
    for table in ("messages", "conversations", "blocks", "block_history", "passages"):
        (row,) = asyncio.run(_pg(pg_url, f"SELECT dead_tuple_count FROM pgstattuple('{table}')"))
        assert row["dead_tuple_count"] == 0, table
