"""Real Redis and PostgreSQL for tests: a private redis-server per session (so tests may stop
and restart it), and a fresh PostgreSQL database when VG_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass

from tests.support.servers import free_port


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class RedisServer:
    """A redis-server process of our own on a free port; stop()/start() simulate an outage."""

    port: int
    dir: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (scripts/test installs it)")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not port_open("127.0.0.1", self.port):
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def start_redis() -> RedisServer:
    return RedisServer(port=free_port(), dir=tempfile.mkdtemp(prefix="vg-redis-")).start()


def postgres_database() -> tuple[str, str] | None:
    """Create a fresh database on VG_TEST_POSTGRES_URL; returns (url, admin_url) or None."""
    admin = os.environ.get("VG_TEST_POSTGRES_URL")
    if not admin:
        return None
    import asyncio

    import asyncpg

    name = f"vg_test_{uuid.uuid4().hex[:10]}"
    plain = admin.replace("postgresql+asyncpg://", "postgresql://")

    async def create() -> None:
        conn = await asyncpg.connect(plain)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    base = plain.rsplit("/", 1)[0]
    return f"postgresql+asyncpg://{base.split('://', 1)[1]}/{name}", plain


def drop_postgres_database(url: str, admin: str) -> None:
    import asyncio

    import asyncpg

    name = url.rsplit("/", 1)[1]

    async def drop() -> None:
        conn = await asyncpg.connect(admin)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(drop())
