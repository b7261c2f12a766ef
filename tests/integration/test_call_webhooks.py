"""The `call.ended` webhook against a real loopback receiver (voice_gateway/webhooks.py,
memory/webhooks.py): signed as the receiver checks it, retried after a 500 and delivered
once per event id; a 400 drops it at once, a 408 is retried; a receiver that never answers is
retried, then dropped with one log line; a second deliverer on the same database (a restart)
sends what the first left pending. And the table's migration matches the ORM."""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from memory.calls import CallData, CallStore
from memory.db import alembic_config, normalize_url
from memory.orm import Base
from memory.service import Memory
from memory.webhooks import DeliveryData, WebhookStore
from tests.support.servers import serve
from tests.support.webhook_receiver import Receiver, SilentSocket, verify
from voice_gateway.settings import Settings
from voice_gateway.webhooks import (
    CALL_ENDED,
    MAX_PAUSE_S,
    CallWebhooks,
    WebhookConfigError,
    WebhookPolicy,
    pause_s,
)

SECRET = "whsec-test"
CALLER = "+15550001234"
TABLE = "webhook_deliveries"
FAST = WebhookPolicy(attempts=3, timeout_s=5.0, backoff_s=0.05)


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    memory = await Memory.open(db_url)
    try:
        yield memory
    finally:
        await memory.close()


async def ended_call(memory: Memory) -> CallData:
    user, _ = await memory.users.create("owner")
    agent = await memory.agents.create(
        user_id=user, blocks=[], name="a", model="scripted/demo", system="s", embedding="x"
    )
    store = CallStore(memory.db)
    call = await store.create(
        agent.id, user_id=user, direction="inbound", transport="twilio",
        status="in-progress", caller=CALLER,
    )  # fmt: skip
    return await store.update(call.id, status="completed", end_reason="caller_hung_up")


async def settled(store: WebhookStore, event_id: str, timeout: float = 20.0) -> DeliveryData:
    """The delivery once it is delivered or dropped."""
    deadline = time.monotonic() + timeout
    while (d := await store.get(event_id)).status == "pending":
        assert time.monotonic() < deadline, f"still pending: {d}"
        await asyncio.sleep(0.02)
    return d


def started(memory: Memory, url: str, policy: WebhookPolicy = FAST) -> CallWebhooks:
    hooks = CallWebhooks(memory.db, url, SECRET, policy, poll_s=0.1)
    hooks.start()
    return hooks


async def test_signed_retried_after_500_and_delivered_once(memory: Memory) -> None:
    receiver = Receiver(SECRET, [500])
    with serve(receiver.app) as srv:
        hooks = started(memory, f"{srv.url}/hook")
        try:
            call = await ended_call(memory)
            event_id = await hooks.call_ended(call)
            assert event_id is not None
            d = await settled(hooks.store, event_id)
            assert (d.status, d.attempts, d.last_error) == ("delivered", 2, None)
            assert await hooks.call_ended(call) is None  # one call.ended per call
            await asyncio.sleep(0.5)  # nothing more is sent
        finally:
            await hooks.aclose()
    first, second = receiver.got  # the 500, then the delivery
    assert (first.answered, second.answered) == (500, 200)
    assert first.event_id == second.event_id == event_id and first.body == second.body
    assert first.verified and second.verified  # signed as the receiver checks it
    assert not verify("another-secret", second.body, second.signature)
    assert not verify(SECRET, second.body.replace(b"completed", b"failed"), second.signature)
    stale = int(second.signature.split(",")[0][2:]) + 3600
    assert not verify(SECRET, second.body, second.signature, now=stale)  # a replay, later
    event = second.event
    assert (event["id"], event["type"]) == (event_id, CALL_ENDED) and event["created_at"]
    report = event["data"]
    assert report["call"]["id"] == call.id and report["call"]["end_reason"] == "caller_hung_up"
    assert (report["transcript"], report["turns"], report["recording"]) == ([], [], None)


async def test_a_400_drops_at_once_a_408_is_retried(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver(SECRET, [408, 400])
    with serve(receiver.app) as srv, caplog.at_level(logging.INFO, "voice_gateway.webhooks"):
        hooks = started(memory, f"{srv.url}/hook", WebhookPolicy(5, 5.0, 0.05))
        try:
            event_id = await hooks.call_ended(await ended_call(memory))
            assert event_id is not None
            d = await settled(hooks.store, event_id)
        finally:
            await hooks.aclose()
    assert (d.status, d.attempts, d.last_error) == ("dropped", 2, "HTTP 400")
    assert [g.answered for g in receiver.got] == [408, 400]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert event_id in line and "dropped after 2 attempt(s): HTTP 400" in line


async def test_a_receiver_that_never_answers_is_retried_then_dropped(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    silent = SilentSocket()
    try:
        with caplog.at_level(logging.DEBUG, "voice_gateway.webhooks"):
            hooks = started(memory, silent.url, WebhookPolicy(3, 0.3, 0.05))
            try:
                call = await ended_call(memory)
                event_id = await hooks.call_ended(call)
                assert event_id is not None
                d = await settled(hooks.store, event_id)
            finally:
                await hooks.aclose()
        assert len(silent.accepted) == 3  # each attempt connected, and was never answered
    finally:
        silent.close()
    assert (d.status, d.attempts, d.last_error) == ("dropped", 3, "ReadTimeout")
    assert d.finished_at is not None
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [
        f"webhook call.ended {event_id} (call {call.id}) dropped after 3 attempt(s): ReadTimeout"
    ]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert CALLER not in logged and CALLER[1:8] not in logged  # not even a part of the number


async def test_a_restart_resumes_a_pending_delivery(db_url: str) -> None:
    receiver = Receiver(SECRET, [503])
    with serve(receiver.app) as srv:
        first = await Memory.open(db_url)
        try:
            hooks = started(first, f"{srv.url}/hook", WebhookPolicy(5, 5.0, 1.0))
            event_id = await hooks.call_ended(await ended_call(first))
            assert event_id is not None
            deadline = time.monotonic() + 10
            while (await hooks.store.get(event_id)).attempts < 1 or not receiver.got:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await hooks.aclose()  # the gateway stops with the event still pending
        finally:
            await first.close()
        left = await _row(db_url, event_id)
        assert (left.status, left.attempts, left.last_error) == ("pending", 1, "HTTP 503")

        second = await Memory.open(db_url)  # the next start, on the same database
        try:
            again = started(second, f"{srv.url}/unused")  # the row keeps its own URL
            try:
                d = await settled(again.store, event_id)
            finally:
                await again.aclose()
        finally:
            await second.close()
    assert (d.status, d.attempts) == ("delivered", 2)
    assert [g.event_id for g in receiver.got] == [event_id, event_id]
    assert [g.answered for g in receiver.got] == [503, 200]
    assert all(g.verified for g in receiver.got) and len(receiver.delivered()) == 1


async def _row(db_url: str, event_id: str) -> DeliveryData:
    memory = await Memory.open(db_url)
    try:
        return await WebhookStore(memory.db).get(event_id)
    finally:
        await memory.close()


async def test_a_claimed_delivery_is_not_sent_twice(memory: Memory) -> None:
    """Two gateways on one database: the second claim of the same attempt fails."""
    store = WebhookStore(memory.db)
    assert await store.enqueue("evt-1", CALL_ENDED, "call-1", "http://127.0.0.1:9/", "{}")
    assert not await store.enqueue("evt-2", CALL_ENDED, "call-1", "http://127.0.0.1:9/", "{}")
    (due,) = await store.due(10)
    claimed = await store.claim(due, due.next_at)
    assert claimed is not None and claimed.attempts == 1
    assert await store.claim(due, due.next_at) is None  # the same row as read before
    await store.delivered(claimed)
    assert (await store.get("evt-1")).status == "delivered" and await store.due(10) == []


def test_pauses_double_with_jitter_and_a_cap() -> None:
    for attempts in range(1, 30):
        full = min(MAX_PAUSE_S, 2.0 * 2 ** (attempts - 1))
        assert full / 2 <= pause_s(2.0, attempts) <= full
    assert len({pause_s(2.0, 3) for _ in range(20)}) > 1  # jittered


async def test_a_url_without_a_secret_is_refused(memory: Memory) -> None:
    assert CallWebhooks.of(Settings(), memory.db) is None
    with pytest.raises(WebhookConfigError, match="VG_CALL_WEBHOOK_SECRET"):
        CallWebhooks.of(Settings(call_webhook_url="http://127.0.0.1:9/hook"), memory.db)
    hooks = CallWebhooks.of(
        Settings(
            call_webhook_url="http://x/hook", call_webhook_secret="s", call_webhook_attempts=4
        ),
        memory.db,
    )
    assert hooks is not None and hooks.policy.attempts == 4


async def _tables(url: str) -> tuple[set[str], list[object]]:
    engine = create_async_engine(normalize_url(url))

    def inspect(conn: sa.Connection) -> tuple[set[str], list[object]]:
        names = set(sa.inspect(conn).get_table_names())
        ctx = MigrationContext.configure(conn)
        with warnings.catch_warnings():  # other tables' expression indexes (SQLite)
            warnings.simplefilter("ignore")
            diffs = [d for d in compare_metadata(ctx, Base.metadata) if f"'{TABLE}'" in repr(d)]
        return names, diffs

    async with engine.connect() as conn:
        out = await conn.run_sync(inspect)
    await engine.dispose()
    return out


def test_migration_up_down_and_matches_the_orm(db_url: str) -> None:
    cfg = alembic_config(normalize_url(db_url))
    command.upgrade(cfg, "head")
    names, diffs = asyncio.run(_tables(db_url))
    assert TABLE in names
    assert diffs == []  # columns, types, indexes and keys as memory/orm/webhooks.py says
    command.downgrade(cfg, "0011")
    assert TABLE not in asyncio.run(_tables(db_url))[0]
    command.upgrade(cfg, "head")
