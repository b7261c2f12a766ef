"""The hot path's SQL straight to the driver, without SQLAlchemy's session machinery (measured:
one read transaction through an `AsyncSession` 0.77 ms, the statement itself 0.04 ms).

A batch is a list of statements run as ONE transaction, all or nothing:
- SQLite: in one hop to a worker thread that owns its own sqlite3 connection (the engine's
  settings: `configure_sqlite`): `BEGIN IMMEDIATE` for a write (the write lock is
  taken first, so a read-modify-write cannot lose an update), the statements, `COMMIT`.
  A read runs on the calling thread instead (`SqliteRunner.read_here`): batches that read are
  point reads (the agent and its blocks), cheaper than the hop.
- PostgreSQL: composed into one statement, `WITH p0 AS (...), p1 AS (...) SELECT (SELECT
  json_agg(p0) FROM p0), ...`, atomic on its own, one round trip on an asyncpg pool.
So the statements of a batch must NOT depend on each other's effects: on PostgreSQL they all
see the snapshot taken when the statement starts (and must not change the same row twice).
Statements use `?` placeholders (never `?` anywhere else in the SQL). Datetimes bind as naive
UTC (the `UTCDateTime` convention), dicts and lists as JSON text. Each statement's rows come
back as dicts by column name, in no guaranteed order on PostgreSQL; `Codec` turns them into
Python values by the ORM column types. The schema stays the ORM's and alembic's.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Table, TypeDecorator
from sqlalchemy.types import TypeEngine

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Stmt:
    sql: str  # `?` placeholders
    params: Sequence[Any] = ()
    returns: bool = False  # a SELECT, or a statement with RETURNING: its rows are wanted
    lock: bool = False  # a read of `Database.exchange` whose rows stay locked to its commit


Decide = Callable[[list[list[Row]]], tuple[Sequence[Stmt], T]]
"""`Database.exchange`'s middle step: from the reads' rows, the writes and the result. Plain
Python on plain data (on SQLite it runs on the driver's worker thread)."""


# -- values ---------------------------------------------------------------------------------


def _dt(v: Any) -> datetime:
    # SQLite: "2026-01-02 03:04:05.678901"; PostgreSQL's json_agg: "2026-01-02T03:04:05.6789"
    return datetime.fromisoformat(v).replace(tzinfo=UTC)


def _converter(t: TypeEngine[Any]) -> Callable[[Any], Any] | None:
    base = t.impl_instance if isinstance(t, TypeDecorator) else t
    if isinstance(base, DateTime):
        return _dt
    if isinstance(base, JSON):
        return json.loads
    if isinstance(base, Boolean):
        return bool
    if isinstance(base, Integer | Float | String):  # Text is a String
        return None
    raise TypeError(f"memory.raw does not decode {t!r} columns")


class Codec:
    """Column names and result conversions of one table, from its ORM definition."""

    def __init__(self, table: Table) -> None:
        self.names = [c.name for c in table.columns]
        self._conv = [(c.name, _converter(c.type)) for c in table.columns]

    def columns(self, alias: str, prefix: str = "") -> str:
        """`a."id", a."name", ...` or, with a prefix, `b."id" AS "b_id", ...` (unique names in
        a join). Names are quoted: some are keywords ("limit")."""
        return ", ".join(f'{alias}."{n}" AS "{prefix}{n}"' for n in self.names)

    def decode(self, row: Mapping[str, Any], *, sqlite: bool, prefix: str = "") -> Row:
        """Python values as the ORM gives them: aware UTC datetimes, parsed JSON, bools.
        JSON arrives as text from SQLite and already parsed from PostgreSQL."""
        out: Row = {}
        for name, conv in self._conv:
            v = row[prefix + name]
            if v is not None and conv is not None and (sqlite or conv is not json.loads):
                v = conv(v)
            out[name] = v
        return out


def _bind(v: Any, sqlite: bool) -> Any:
    if isinstance(v, datetime):
        if v.tzinfo is not None:
            v = v.astimezone(UTC).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else v  # SQLAlchemy's SQLite text
    if isinstance(v, dict | list):
        return json.dumps(v)
    return v


async def run_to_end(fut: asyncio.Future[T]) -> T:
    """Await a batch under way. A cancelled caller first waits for the transaction to end
    (committed or rolled back, never left open), then the cancellation goes on."""
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        while not fut.done():
            try:
                await asyncio.wait([fut])
            except asyncio.CancelledError:
                continue  # cancelled again: the first cancellation is raised below
        if not fut.cancelled():
            fut.exception()  # retrieved: nobody wants the outcome now
        raise


# -- SQLite: worker threads, each with its own connection -----------------------------------


def configure_sqlite(conn: Any, busy_timeout_ms: int = 30000) -> None:
    """The settings of every SQLite connection, the engine's and the workers'. WAL is set on
    the file by run_migrations (ensure_wal); only a database opened without migrating is
    switched here, if it is not in WAL mode yet (a switch while another connection writes
    fails at once with "database is locked")."""
    cur = conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    # a deleted or rewritten row's bytes are zeroed, not left in free space (memory.scrub);
    # some builds default to it, this makes it so on all
    cur.execute("PRAGMA secure_delete=ON")
    cur.execute("PRAGMA journal_mode")
    if str(cur.fetchone()[0]).lower() != "wal":
        cur.execute("PRAGMA journal_mode=WAL")
    cur.close()


def _connect(path: str, busy_timeout_ms: int = 30000) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout_ms / 1000, isolation_level=None, check_same_thread=False
    )
    try:
        configure_sqlite(conn, busy_timeout_ms)
    except BaseException:
        conn.close()
        raise
    return conn


def _execute(conn: sqlite3.Connection, stmts: Sequence[Stmt]) -> list[list[Row]]:
    out: list[list[Row]] = []
    for s in stmts:
        cur = conn.execute(s.sql, [_bind(v, True) for v in s.params])
        if not s.returns:
            cur.close()  # an unread statement would keep its read snapshot open
            out.append([])
            continue
        names = [d[0] for d in cur.description]
        out.append([dict(zip(names, r, strict=True)) for r in cur.fetchall()])
    return out


class SqliteRunner:
    """Batches on up to `threads` worker threads, one sqlite3 connection per thread; reads
    also on the calling thread (`read_here`)."""

    def __init__(self, path: str, threads: int = 4) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="vg-sqlite")
        self._local = threading.local()  # a worker's connection
        self._here = threading.local()  # a caller's own connection (read_here)
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def submit(self, stmts: Sequence[Stmt], write: bool) -> Future[list[list[Row]]]:
        return self._pool.submit(self._run, stmts, write)

    def submit_exchange(self, reads: Sequence[Stmt], decide: Decide[T]) -> Future[T]:
        return self._pool.submit(self._exchange, reads, decide)

    def _exchange(self, reads: Sequence[Stmt], decide: Decide[T]) -> T:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")  # the write lock first: nobody writes in between
        try:
            writes, result = decide(_execute(conn, reads))
            _execute(conn, writes)
            conn.execute("COMMIT")
            return result
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def read_here(self, stmts: Sequence[Stmt]) -> list[list[Row]] | None:
        """A read on the calling thread (the event loop's), or None if it would have to wait.

        A point read costs ~20 µs; a hop to a worker thread costs two thread wake-ups, ~0.1 ms
        on an idle machine and several ms on a busy one (the worker and then the event loop
        wait for a core). A WAL reader takes no lock that a writer holds, so this does not
        block; its connection has busy_timeout 0 so that the rare case that must wait
        (e.g. another connection holds the file exclusively) fails at once and goes to a
        worker instead, whose connection waits."""
        try:
            conn: sqlite3.Connection | None = getattr(self._here, "conn", None)
            if conn is None:
                conn = self._here.conn = self._open(busy_timeout_ms=0)
            return self._run(stmts, False, conn)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return None
            raise

    def _open(self, busy_timeout_ms: int = 30000) -> sqlite3.Connection:
        conn = _connect(self.path, busy_timeout_ms)
        with self._lock:
            self._conns.append(conn)
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    def _run(
        self, stmts: Sequence[Stmt], write: bool, conn: sqlite3.Connection | None = None
    ) -> list[list[Row]]:
        conn = conn or self._conn()
        tx = write or len(stmts) > 1
        if tx:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            out = _execute(conn, stmts)
            if tx:
                conn.execute("COMMIT")
            return out
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        """Waits for the batches under way, then closes every connection."""
        await asyncio.to_thread(self._pool.shutdown, wait=True)
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()


# -- PostgreSQL: one composed statement on an asyncpg pool ----------------------------------


_PLACEHOLDER = re.compile(r"\?")


@lru_cache(maxsize=256)
def compose_pg(sqls: tuple[str, ...], returns: tuple[bool, ...]) -> str:
    """The statements as one: (data-modifying) CTEs, each wanted result as a json_agg column."""
    counter = iter(range(1, 1 << 30))

    def number(_m: re.Match[str]) -> str:
        return f"${next(counter)}"

    parts = [f"p{i} AS ({_PLACEHOLDER.sub(number, sql)})" for i, sql in enumerate(sqls)]
    wanted = [f"(SELECT json_agg(p{i}) FROM p{i})" for i, r in enumerate(returns) if r]
    return f"WITH {', '.join(parts)} SELECT {', '.join(wanted) or 'NULL'}"


async def _composed(conn: Any, stmts: Sequence[Stmt]) -> list[list[Row]]:
    sql = compose_pg(tuple(s.sql for s in stmts), tuple(s.returns for s in stmts))
    row = await conn.fetchrow(sql, *[_bind(v, False) for s in stmts for v in s.params])
    values = iter(row)
    return [json.loads(next(values) or "[]") if s.returns else [] for s in stmts]


async def _no_reset(conn: Any) -> None:
    """A batch is one statement, never leaving a transaction or session state behind: skip
    asyncpg's reset query (a round trip) when a connection goes back to the pool."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class PgPool:
    """An asyncpg pool, opened on first use, on the event loop of that use."""

    def __init__(self, dsn: str, size: int) -> None:
        self.dsn, self.size = dsn, size
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None

    async def _get(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop, self._opening = loop, asyncio.Lock()
        elif self._loop is not loop:
            raise RuntimeError("a Database is used on one event loop only")
        if self._pool is None:
            assert self._opening is not None
            async with self._opening:
                if self._pool is None:
                    import asyncpg

                    self._pool = await asyncpg.create_pool(
                        self.dsn, min_size=0, max_size=self.size, reset=_no_reset
                    )
        return self._pool

    async def batch(self, stmts: Sequence[Stmt]) -> list[list[Row]]:
        pool = await self._get()
        async with pool.acquire() as conn:
            return await _composed(conn, stmts)

    async def exchange(self, reads: Sequence[Stmt], decide: Decide[T]) -> T:
        """The reads (those with `lock`: FOR UPDATE) as one statement, then the writes
        `decide` gives as one more, in one transaction: three round trips and the commit."""
        pool = await self._get()
        async with pool.acquire() as conn, conn.transaction():
            locked = [
                Stmt(f"{s.sql} FOR UPDATE", s.params, s.returns) if s.lock else s for s in reads
            ]
            writes, result = decide(await _composed(conn, locked))
            if writes:
                await _composed(conn, writes)
            return result

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
