"""Engine and sessions. SQLite: WAL + BEGIN IMMEDIATE for writes; PostgreSQL: asyncpg."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_WRITE = "vg_write"
AFTER_COMMIT = "vg_after_commit"  # session.info key: callbacks to run once the write committed


def after_commit(session: AsyncSession, callback: Any) -> None:
    """Run `callback()` after the surrounding `Database.write()` transaction commits."""
    session.info.setdefault(AFTER_COMMIT, []).append(callback)


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
        if self.is_sqlite:
            self._ensure_sqlite_dir()
            kwargs["connect_args"] = {"timeout": 30}
            kwargs["pool_reset_on_return"] = None  # sessions end their own transactions
        else:
            kwargs.update(pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
        self.engine: AsyncEngine = create_async_engine(self.url, **kwargs)
        if self.is_sqlite:
            self._install_sqlite_hooks()
        self._write_engine = self.engine.execution_options(**{_WRITE: True})
        self._reader = async_sessionmaker(self.engine, expire_on_commit=False)
        self._writer = async_sessionmaker(self._write_engine, expire_on_commit=False)

    def _ensure_sqlite_dir(self) -> None:
        path = self.url.split("///", 1)[-1].split("?", 1)[0]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def _install_sqlite_hooks(self) -> None:
        sync_engine = self.engine.sync_engine

        @event.listens_for(sync_engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            # WAL is set on the file by run_migrations (ensure_wal); only a database opened
            # without migrating is switched here, if it is not in WAL mode yet
            cur.execute("PRAGMA journal_mode")
            if str(cur.fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

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
        async with self._writer() as session:
            async with session.begin():
                yield session
            for callback in session.info.pop(AFTER_COMMIT, []):
                callback()

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
        await self.engine.dispose()


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
