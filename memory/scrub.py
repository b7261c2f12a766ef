"""Erased rows leave the database's files, not only its tables (right to erasure).

SQLite: every connection deletes with `secure_delete` on (memory.raw.configure_sqlite): a
deleted or rewritten row's bytes are zeroed in its page, a freed page is zeroed. The zeroed
page images go to the write-ahead log, where the older images, words and all, stay until a
checkpoint. `scrub` checkpoints with TRUNCATE: the newest images are copied into the database
file and the -wal file is cut to zero bytes. It waits for readers of older snapshots; after
`TRIES` busy tries it logs a warning, and the next checkpoint (SQLite's automatic one every
1000 pages, or the last connection's close at shutdown) finishes the job.

PostgreSQL: a DELETE (and an UPDATE's old version) leaves dead tuples in the table's pages
until VACUUM. `scrub` runs a plain VACUUM of the tables an erasure touches, outside any
transaction (VACUUM refuses to run in one): the dead tuples and their index entries are
removed and their space is marked free for later rows to overwrite; it is NOT zeroed. VACUUM
FULL would rewrite each table into new files, but holds an ACCESS EXCLUSIVE lock meanwhile,
stopping every call's reads and writes of `messages` for as long as the rewrite takes: an
operator's maintenance step (docs/operations.md, "Erasure on disk"), not each erasure's.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Iterable

from sqlalchemy.exc import SQLAlchemyError

from memory.db import Database, sqlite_path
from memory.orm import (
    Base,
    Block,
    CallRecord,
    Conversation,
    Identity,
    IdentityAgent,
    Message,
    Outbox,
    Passage,
    SleeptimeState,
)

log = logging.getLogger(__name__)

TRIES = 3
WAIT_S = 2.0  # the busy handler's wait for readers, per try

# what IdentityStore.erase deletes and CallStore.forget_caller rewrites
_WRITTEN = (
    Message,
    Conversation,
    Block,
    Passage,
    Outbox,
    SleeptimeState,
    IdentityAgent,
    Identity,
    CallRecord,
)


def with_cascades(tables: Iterable[str]) -> list[str]:
    """The `tables` named and every table whose rows an ON DELETE CASCADE removes with
    theirs (runs and steps with a conversation, block history with a block), in dependency
    order."""
    names = set(tables)
    grown = True
    while grown:
        grown = False
        for table in Base.metadata.sorted_tables:
            if table.name in names:
                continue
            if any(
                fk.ondelete == "CASCADE" and fk.column.table.name in names
                for fk in table.foreign_keys
            ):
                names.add(table.name)
                grown = True
    return [t.name for t in Base.metadata.sorted_tables if t.name in names]


ERASED_TABLES = with_cascades(str(model.__tablename__) for model in _WRITTEN)


async def scrub(db: Database, tables: Iterable[str] = ERASED_TABLES) -> bool:
    """After an erasure committed: what it deleted leaves the files (see above). False, with a
    warning logged, when that could not finish now."""
    if db.is_sqlite:
        return await asyncio.to_thread(checkpoint, sqlite_path(db.url))
    return await vacuum(db, tables)


def checkpoint(path: str, tries: int = TRIES, wait_s: float = WAIT_S) -> bool:
    """`PRAGMA wal_checkpoint(TRUNCATE)` on its own connection, up to `tries` times."""
    conn = sqlite3.connect(path, timeout=wait_s, isolation_level=None)
    try:
        for attempt in range(1, tries + 1):
            try:
                busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError as exc:  # the checkpoint lock itself was busy
                if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
                busy, frames = 1, -1
            if not busy:
                return True
            if attempt < tries:
                time.sleep(0.1 * attempt)
        log.warning(
            "erasure: the write-ahead log checkpoint stayed busy (%d tries, %d frames in the "
            "log); the erased rows' old page images leave it at the next checkpoint",
            tries,
            frames,
        )
        return False
    finally:
        conn.close()


async def vacuum(db: Database, tables: Iterable[str]) -> bool:
    """A plain VACUUM of `tables` (PostgreSQL), in autocommit as VACUUM must run."""
    names = ", ".join(f'"{name}"' for name in tables)
    try:
        async with db.engine.connect() as conn:
            auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await auto.exec_driver_sql(f"VACUUM {names}")
    except (SQLAlchemyError, OSError) as exc:  # the erasure has committed: report, not undo
        log.warning("erasure: VACUUM %s failed: %s", names, exc)
        return False
    return True
