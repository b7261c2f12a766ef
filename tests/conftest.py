"""Shared fixtures: databases (SQLite always, PostgreSQL when VG_TEST_POSTGRES_URL is set),
a private Redis server, the loopback fake LLM, and a live gateway server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_llm import FakeLLM
from tests.support.servers import ServerThread
from tests.support.services import (
    RedisServer,
    drop_postgres_database,
    postgres_database,
    start_redis,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

BACKENDS = ["sqlite"] + (["postgres"] if os.environ.get("VG_TEST_POSTGRES_URL") else [])


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL: SQLite in tmp_path, and PostgreSQL when configured."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"
        return
    made = postgres_database()
    assert made is not None
    url, admin = made
    try:
        yield url
    finally:
        drop_postgres_database(url, admin)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    import redis

    if redis_server.proc is None:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[tuple[FakeLLM, ServerThread]]:
    fake = FakeLLM()
    server = ServerThread(fake.app).start()
    try:
        yield fake, server
    finally:
        server.stop()


@pytest.fixture
def fake_llm(fake_llm_server: tuple[FakeLLM, ServerThread]) -> FakeLLM:
    fake, _ = fake_llm_server
    fake.queue.clear()
    fake.requests.clear()
    fake.first_chunk_at.clear()
    from tests.support.fake_llm import default_responder

    fake.responder = default_responder
    return fake


@pytest.fixture
def fake_llm_url(fake_llm_server: tuple[FakeLLM, ServerThread], fake_llm: FakeLLM) -> str:
    return f"{fake_llm_server[1].url}/v1"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def gateway_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start gateways: `gateway_factory(database_url=..., **settings)` -> ServerThread."""
    from contextlib import ExitStack

    from tests.support.gateway import running_gateway

    with ExitStack() as stack:

        def start(database_url: str | None = None, **overrides):  # type: ignore[no-untyped-def]
            url = database_url or f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}"
            return stack.enter_context(running_gateway(url, **overrides))

        yield start
