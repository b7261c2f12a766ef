"""`Database.batch` (memory.raw), the agent loop's hot path, on SQLite and PostgreSQL: values
round-trip as the ORM stores and returns them, a failing batch leaves nothing behind, a
cancelled caller never leaves a transaction open, concurrent writers lose no update."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest

from memory.db import Database, sqlite_path
from memory.ids import default_conversation_id, new_id
from memory.models import AgentData, BlockSpec, MessageData, ToolCallData, TranscriptEvent
from memory.orm import Message
from memory.raw import Stmt
from memory.service import Memory
from transcripts.bus import OutboxPublisher


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    mem = await Memory.open(db_url)
    yield mem
    await mem.close()


async def make_agent(memory: Memory) -> AgentData:
    return await memory.agents.create(
        user_id=None,
        name="Zoë ☃",
        system="sys",
        model="openai/x",
        embedding="local/all-minilm-l6-v2",
        tags=["a", "b"],
        tool_names=["send_message"],
        greeting="hi",
        voice_default=True,
        context_window=1234,
        metadata={"k": [1, 2.5, None, True, "é"], "nested": {"x": {}}},
        blocks=[
            BlockSpec(label="persona", value="p", read_only=True),
            BlockSpec(
                label="human", value="h\n☃", limit=77, description="d", sleeptime_editable=True
            ),
        ],
    )


def user_msg(agent_id: str, text: str = "x", **kw: object) -> MessageData:
    return MessageData(id=new_id("message"), agent_id=agent_id, role="user", content=text, **kw)


@asynccontextmanager
async def write_lock_held(db: Database, agent_id: str) -> AsyncIterator[None]:
    """Another connection holds what a step's write needs: SQLite's write lock, or the agent's
    row on PostgreSQL."""
    if db.is_sqlite:
        conn = sqlite3.connect(sqlite_path(db.url), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("COMMIT")
            conn.close()
        return
    pg = await asyncpg.connect(db.url.replace("postgresql+asyncpg://", "postgresql://"))
    tx = pg.transaction()
    await tx.start()
    await pg.execute("SELECT 1 FROM agents WHERE id = $1 FOR UPDATE", agent_id)
    try:
        yield
    finally:
        await tx.commit()
        await pg.close()


async def test_agent_read_matches_the_orm(memory: Memory) -> None:
    created = await make_agent(memory)
    raw = await memory.agents.get(created.id)
    (orm,) = await memory.agents.page(name="Zoë ☃")  # the ORM path
    assert raw == orm and raw.model_dump() == orm.model_dump()
    assert raw.metadata == {"k": [1, 2.5, None, True, "é"], "nested": {"x": {}}}
    assert raw.voice_default is True and raw.tags == ["a", "b"] and raw.context_window == 1234
    assert [(b.label, b.read_only, b.sleeptime_editable) for b in raw.blocks] == [
        ("persona", True, False),
        ("human", False, True),
    ]
    assert raw.created_at.utcoffset() == timedelta(0) and raw.blocks[1].updated_at is not None
    assert raw.blocks[1].updated_at.tzinfo is UTC


async def test_stored_messages_are_what_the_orm_stores(memory: Memory) -> None:
    agent = await make_agent(memory)
    await memory.conversations.create(agent.id, conversation_id="conv-1")
    plus2 = timezone(timedelta(hours=2))
    fields = dict(
        agent_id=agent.id,
        role="assistant",
        content="héllo ☃ 'single' \"double\" ?",
        reasoning="why",
        tool_calls=[ToolCallData(id="c1", name="noop", arguments='{"a": [1, "☃"]}')],
        tool_name="noop",
        tool_status="success",
        conversation_id="conv-1",
        turn_id="turn-1",
        step_id="step-1",
        truncated=True,
        produced="the full text",
        in_context=True,
        created_at=datetime(2026, 1, 2, 5, 4, 5, 678901, tzinfo=plus2),
    )
    raw_msg = MessageData(id=new_id("message"), **fields)  # type: ignore[arg-type]
    orm_msg = MessageData(id=new_id("message"), **fields)  # type: ignore[arg-type]
    await memory.messages.append([raw_msg])
    async with memory.db.write() as s:  # what the ORM stored before the raw path existed
        s.add(Message(**orm_msg.model_dump(exclude={"seq"})))
    (rows,) = await memory.db.batch(
        [Stmt("SELECT * FROM messages WHERE agent_id = ?", (agent.id,), returns=True)]
    )
    by_id = {r.pop("id"): r for r in rows}
    for r in by_id.values():
        r.pop("seq")
    assert by_id[raw_msg.id] == by_id[orm_msg.id]
    (back, _) = await memory.messages.in_context("conv-1")  # read through the ORM
    assert back == raw_msg and back.seq == raw_msg.seq is not None
    assert back.created_at == datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert back.created_at is not None and back.created_at.tzinfo is UTC


async def test_outbox_row_round_trips(memory: Memory) -> None:
    agent = await make_agent(memory)
    now = datetime.now(UTC)
    event = TranscriptEvent(
        event_id=new_id("evt"),
        agent_id=agent.id,
        turn_id="turn-1",
        source="voice",
        user_text="hi ☃",
        agent_text="hello",
        agent_text_heard="hel",
        interrupted=True,
        started_at=now - timedelta(seconds=2),
        ended_at=now,
    )
    await memory.finish_turn(event)
    assert [e for _, e in await memory.outbox.pending()] == [event]
    count, age_s = await memory.outbox.backlog()
    assert count == 1 and 0 <= age_s < 3600


async def test_a_failing_batch_leaves_nothing_behind(memory: Memory) -> None:
    agent = await make_agent(memory)
    first = user_msg(agent.id, "first")
    await memory.messages.append([first])
    version = (await memory.conversations.get(default_conversation_id(agent.id))).messages_version
    window = await memory.messages.in_context(default_conversation_id(agent.id), version)
    event = TranscriptEvent(
        event_id=new_id("evt"),
        agent_id=agent.id,
        turn_id="t",
        source="text",
        user_text="u",
        agent_text="a",
        agent_text_heard="a",
        started_at=datetime.now(UTC),
        ended_at=datetime.now(UTC),
    )
    duplicate = first.model_copy(update={"seq": None})  # the same id again: a unique violation
    with pytest.raises(Exception, match=r"(?i)unique"):
        await memory.messages.append(
            [user_msg(agent.id, "second"), duplicate], also=[memory.outbox.insert(event)]
        )
    with pytest.raises(Exception, match=r"(?i)unique"):  # the summarizer's evict + summary
        await memory.messages.append([duplicate], evict_upto=first.seq)
    assert await memory.outbox.depth() == 0
    assert await memory.messages.count(agent.id) == 1
    assert (
        await memory.conversations.get(default_conversation_id(agent.id))
    ).messages_version == version
    assert (
        await memory.messages.in_context(default_conversation_id(agent.id)) == window
    )  # nothing evicted


async def test_summary_replaces_the_evicted_messages_in_one_write(memory: Memory) -> None:
    agent = await make_agent(memory)
    old = [user_msg(agent.id, f"old {i}") for i in range(3)]
    recent = user_msg(agent.id, "recent")
    await memory.messages.append([*old, recent])
    summary = MessageData(id=new_id("message"), agent_id=agent.id, role="user", kind="summary")
    await memory.messages.append([summary], evict_upto=old[-1].seq)
    version = (await memory.conversations.get(default_conversation_id(agent.id))).messages_version
    assert [
        m.id for m in await memory.messages.in_context(default_conversation_id(agent.id), version)
    ] == [
        recent.id,
        summary.id,
    ]
    assert await memory.messages.count(agent.id) == 5  # recall keeps the evicted ones


async def test_a_cancelled_write_ends_its_transaction_first(memory: Memory) -> None:
    agent = await make_agent(memory)
    message = user_msg(agent.id, "spoken before the barge-in")
    async with write_lock_held(memory.db, agent.id):
        task = asyncio.create_task(memory.messages.append([message]))
        await asyncio.sleep(0.2)  # the batch is waiting for the lock
        task.cancel()
        await asyncio.sleep(0.1)
        assert not task.done()  # the caller waits: the transaction cannot have ended yet
    with pytest.raises(asyncio.CancelledError):
        await task
    # the write committed whole, and nothing was left open: the next write goes through
    assert (await memory.conversations.get(default_conversation_id(agent.id))).messages_version == 1
    await asyncio.wait_for(memory.messages.append([user_msg(agent.id)]), 10)
    assert (await memory.messages.in_context(default_conversation_id(agent.id)))[0].id == message.id

    async def lock_again() -> None:  # no transaction of ours holds the lock any more
        async with write_lock_held(memory.db, agent.id):
            pass

    await asyncio.wait_for(lock_again(), 10)


async def test_concurrent_writers_lose_no_update(db_url: str) -> None:
    """Two Memory objects stand for two gateway processes, each with its own connections."""
    a, b = await Memory.open(db_url), await Memory.open(db_url, migrate=False)
    try:
        agent = await make_agent(a)
        await a.messages.in_context(
            default_conversation_id(agent.id), 0
        )  # a's cache holds the (empty) window
        writes = [
            (a if i % 2 else b).messages.append([user_msg(agent.id, str(i))]) for i in range(30)
        ]
        await asyncio.gather(*writes)
        version = (await a.conversations.get(default_conversation_id(agent.id))).messages_version
        assert version == 30
        stored = await b.messages.page(agent.id, order="asc", limit=100)
        assert sorted(m.content for m in stored) == sorted(str(i) for i in range(30))
        assert len({m.seq for m in stored}) == 30
        window = await a.messages.in_context(
            default_conversation_id(agent.id), version
        )  # cached or re-read
        assert [m.id for m in window] == [m.id for m in stored]
    finally:
        await a.close()
        await b.close()


async def test_new_worker_connections_wait_for_the_write_lock(sqlite_url: str) -> None:
    first = await Memory.open(sqlite_url)  # migrates: the file is put in WAL mode once
    agent = await make_agent(first)
    await first.close()
    raw = sqlite3.connect(sqlite_path(sqlite_url), isolation_level=None)
    raw.execute("BEGIN IMMEDIATE")  # another process holds the write lock for a while
    second = await Memory.open(sqlite_url, migrate=False)  # its workers open new connections
    try:
        release = asyncio.get_running_loop().call_later(0.5, raw.execute, "COMMIT")
        assert (await second.agents.get(agent.id)).id == agent.id  # a read does not wait (WAL)
        await second.messages.append([user_msg(agent.id)])  # a write waits, then succeeds
        release.cancel()
        assert (
            await second.conversations.get(default_conversation_id(agent.id))
        ).messages_version == 1
    finally:
        await second.close()
        raw.close()


async def test_a_read_runs_on_the_loop_and_waits_in_a_worker_when_it_must(
    sqlite_url: str,
) -> None:
    """A read batch runs on the event loop's own connection (no thread hop). When SQLite would
    make it wait (another connection holds the file exclusively) it goes to a worker thread:
    the event loop keeps running, and the read returns once the lock is released."""
    first = await Memory.open(sqlite_url)
    agent = await make_agent(first)
    assert (await first.agents.get(agent.id)).name == agent.name
    assert not [t for t in threading.enumerate() if t.name.startswith("vg-sqlite")]  # no hop
    await first.close()
    raw = sqlite3.connect(sqlite_path(sqlite_url), isolation_level=None)
    raw.execute("PRAGMA locking_mode=EXCLUSIVE")
    raw.execute("BEGIN EXCLUSIVE")
    raw.execute("UPDATE agents SET name = 'renamed'")
    second = await Memory.open(sqlite_url, migrate=False)
    try:
        read = asyncio.create_task(second.agents.get(agent.id))
        ticks = 0
        while ticks < 5:  # the loop runs while the read waits (it would hang on the loop)
            await asyncio.sleep(0.01)
            ticks += 1
        assert not read.done()
        raw.execute("COMMIT")
        raw.close()
        assert (await read).name == "renamed"
        assert (await second.agents.get(agent.id)).name == "renamed"  # on the loop again
    finally:
        raw.close()
        await second.close()


def test_an_in_memory_sqlite_database_is_refused() -> None:
    for url in ("sqlite+aiosqlite:///:memory:", "sqlite://", "sqlite:///file:x?mode=memory"):
        with pytest.raises(ValueError, match="database file"):
            Database(url)


async def test_close_ends_the_workers_and_connections(db_url: str) -> None:
    before = set(threading.enumerate())
    memory = await Memory.open(db_url)
    agent = await make_agent(memory)
    await asyncio.gather(*(memory.messages.append([user_msg(agent.id)]) for _ in range(8)))
    ours = [t for t in threading.enumerate() if t not in before and t.name.startswith("vg-sq")]
    await memory.close()
    if memory.db.is_sqlite:
        assert ours and not any(t.is_alive() for t in ours)
        return
    name = memory.db.url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(memory.db.url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        for _ in range(100):  # a backend exits just after its client hung up
            sessions = await admin.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                name,
            )
            if sessions == 0:
                break
            await asyncio.sleep(0.05)
        assert sessions == 0
    finally:
        await admin.close()


async def test_a_turn_ending_during_a_drain_is_published_without_waiting_for_the_poll(
    memory: Memory,
) -> None:
    """The publisher's wake-up is re-armed before each drain: a turn notified while the sink is
    busy with the previous one goes out next, not at the next poll (here 30 s away)."""
    agent = await make_agent(memory)
    now = datetime.now(UTC)

    def event(turn: str) -> TranscriptEvent:
        return TranscriptEvent(
            event_id=new_id("evt"), agent_id=agent.id, turn_id=turn, source="voice",
            user_text=turn, agent_text="ok", agent_text_heard="ok", interrupted=False,
            started_at=now, ended_at=now,
        )  # fmt: skip

    sent: list[str] = []
    in_sink = asyncio.Event()

    async def slow_sink(events: list[TranscriptEvent]) -> None:
        in_sink.set()
        await asyncio.sleep(0.3)
        sent.extend(e.turn_id for e in events)

    publisher = OutboxPublisher(memory, slow_sink, poll_s=30.0, min_interval_s=0.0)
    task = asyncio.create_task(publisher.run())
    try:
        await memory.finish_turn(event("first"))
        publisher.notify()
        await asyncio.wait_for(in_sink.wait(), 5)
        await memory.finish_turn(event("second"))  # ends while the first is being published
        publisher.notify()
        deadline = asyncio.get_running_loop().time() + 5
        while sent != ["first", "second"] and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert sent == ["first", "second"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
