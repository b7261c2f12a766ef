"""Engine and sessions. SQLite: WAL + BEGIN IMMEDIATE for writes; PostgreSQL: asyncpg.
The agent loop's hot path (the agent read, each step's write) skips the ORM: `Database.batch`
runs raw statements on the driver (memory.raw)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from memory.raw import (
    Decide,
    PgPool,
    Row,
    SqliteRunner,
    Stmt,
    T,
    configure_sqlite,
    run_to_end,
)

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_WRITE = "vg_write"


def normalize_url(url: str) -> str:
    """Accept plain postgres:// / sqlite:// URLs and pick the async drivers."""
    for plain, driver in (
        ("postgresql://", "postgresql+asyncpg://"),
        ("postgres://", "postgresql+asyncpg://"),
        ("sqlite://", "sqlite+aiosqlite://"),
    ):
        if url.startswith(plain):
            return driver + url[len(plain) :]
    return url


class Database:
    """One engine per process. `read()` for queries, `write()` for read-modify-write."""

    def __init__(self, url: str, *, echo: bool = False, pool_size: int = 10) -> None:
        self.url = normalize_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        kwargs: dict[str, Any] = {"echo": echo}
        self._sqlite: SqliteRunner | None = None
        self._pg: PgPool | None = None
        if self.is_sqlite:
            path = sqlite_path(self.url)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._sqlite = SqliteRunner(path)
            kwargs["connect_args"] = {"timeout": 30}
            kwargs["pool_reset_on_return"] = None  # sessions end their own transactions
        else:
            # 2 * pool_size connections at most, as before the hot path had its own pool: the
            # ORM's pool_size + half as overflow, the hot path's asyncpg pool the other half
            hot = max(1, pool_size // 2)
            kwargs.update(pool_size=pool_size, max_overflow=pool_size - hot, pool_pre_ping=True)
            dsn = make_url(self.url).set(drivername="postgresql")
            self._pg = PgPool(dsn.render_as_string(hide_password=False), hot)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.is_sqlite:
            self._install_sqlite_hooks()
        self._write_engine = self.engine.execution_options(**{_WRITE: True})
        self._reader = async_sessionmaker(self.engine, expire_on_commit=False)
        self._writer = async_sessionmaker(self._write_engine, expire_on_commit=False)

    def _install_sqlite_hooks(self) -> None:
        sync_engine = self.engine.sync_engine

        @event.listens_for(sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            configure_sqlite(dbapi_conn)

        @event.listens_for(sync_engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get(_WRITE, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        async with self._reader() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A transaction that holds the write lock from its start (SQLite) and commits on exit."""
        async with self._writer() as session, session.begin():
            yield session

    async def batch(self, stmts: Sequence[Stmt], *, write: bool = False) -> list[list[Row]]:
        """Run `stmts` as one transaction straight on the driver: on SQLite a write in one
        thread hop (BEGIN IMMEDIATE) and a read on this thread (so keep read batches to point
        reads), on PostgreSQL one round trip. The statements must not depend on each other's
        effects (see memory.raw). Returns each statement's rows (empty unless `returns`). A
        cancelled caller waits for the transaction to end first."""
        if not stmts:
            return []
        if self._sqlite is not None:
            if not write and (rows := self._sqlite.read_here(stmts)) is not None:
                return rows  # a point read: on this thread, no hop (see read_here)
            fut = asyncio.wrap_future(self._sqlite.submit(stmts, write))
        else:
            assert self._pg is not None
            fut = asyncio.ensure_future(self._pg.batch(stmts))
        return await run_to_end(fut)

    async def exchange(self, reads: Sequence[Stmt], decide: Decide[T]) -> T:
        """Read, decide, write: ONE write transaction straight on the driver for a
        read-modify-write that `batch` cannot express. The reads run first (on SQLite under
        the write lock, taken at BEGIN; on PostgreSQL those marked `lock` with FOR UPDATE),
        `decide(rows)` gives the writes (plain Python on plain data: on SQLite it runs on the
        driver's worker thread) and the result, the writes run, it commits. The statements
        within the reads, and within the writes, must not depend on each other's effects, as
        in `batch`. A cancelled caller waits for the transaction to end first."""
        if self._sqlite is not None:
            fut: asyncio.Future[T] = asyncio.wrap_future(
                self._sqlite.submit_exchange(reads, decide)
            )
        else:
            assert self._pg is not None
            fut = asyncio.ensure_future(self._pg.exchange(reads, decide))
        return await run_to_end(fut)

    async def ping(self) -> bool:
        try:
            async with self.read() as s:
                await s.execute(text("SELECT 1"))
            return True
        except Exception:  # any driver error means "not reachable"
            log.warning("database ping failed", exc_info=True)
            return False

    async def migrate(self) -> None:
        """Bring the schema to the newest revision (alembic upgrade head)."""
        await asyncio.to_thread(run_migrations, self.url)

    async def close(self) -> None:
        if self._sqlite is not None:
            await self._sqlite.close()
        if self._pg is not None:
            await self._pg.close()
        await self.engine.dispose()


def sqlite_path(url: str) -> str:
    """The database file of a SQLite URL. An in-memory database is refused: the engine, the
    raw workers and the migrations each open their own connections, so each would see a
    different empty database."""
    u = make_url(url)
    if not u.database or u.database == ":memory:" or "mode" in u.query or "uri" in u.query:
        raise ValueError(
            f"SQLite needs a database file, not {url!r}: e.g. sqlite+aiosqlite:///./data/vg.db"
        )
    return u.database


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def run_migrations(url: str) -> None:
    """alembic upgrade head, once across processes: PostgreSQL takes an advisory lock (in
    env.py); a SQLite file gets an flock on a sibling lock file."""
    import fcntl

    from alembic import command

    url = normalize_url(url)
    path = url.split("///", 1)[-1].split("?", 1)[0] if url.startswith("sqlite") else ""
    if not path or path == ":memory:":
        command.upgrade(alembic_config(url), "head")
        return
    with open(f"{path}.migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            command.upgrade(alembic_config(url), "head")
            ensure_wal(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_wal(path: str) -> None:
    """Put the SQLite file in WAL mode (a property of the file, kept across connections).
    Done once, before the pools open: switching needs the file to itself, and a connection
    that tries it while another one writes fails at once with "database is locked"."""
    import sqlite3

    conn = sqlite3.connect(path, timeout=30)
    try:
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
