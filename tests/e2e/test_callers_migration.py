"""A database made by the previous release (schema 0004: one context per agent, messages with
and without a conversation tag, one `human` block per agent, sleeptime state per agent)
upgrades to head on SQLite and PostgreSQL: every agent's messages are in its default
conversation in their order, `human` became a caller template, and a new caller gets a copy
of it while the agent's other blocks stay agent-wide."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from alembic import command
from sqlalchemy.ext.asyncio import create_async_engine

from memory.db import alembic_config
from memory.ids import default_conversation_id
from memory.service import Memory

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _filler(col: sa.Column[Any]) -> Any:
    """A value for a NOT NULL column the test does not care about."""
    t = col.type
    if isinstance(t, sa.Boolean):
        return False
    if isinstance(t, sa.Integer):
        return 0
    if isinstance(t, sa.JSON):
        return json.dumps([])
    if isinstance(t, sa.DateTime) or "date" in type(t).__name__.lower():
        return T0
    return "x"


async def _insert(conn: Any, table: str, **values: Any) -> None:
    """INSERT a row of a table as the old schema has it (reflected), raw SQL."""

    def cols(sync: Any) -> list[dict[str, Any]]:
        return list(sa.inspect(sync).get_columns(table))

    columns = await conn.run_sync(cols)
    row = dict(values)
    for c in columns:
        name = c["name"]
        if name in row or c["nullable"] or c.get("autoincrement") is True:
            continue
        if c.get("default") is not None:
            continue
        row[name] = _filler(sa.Column(name, c["type"]))
    for k, v in row.items():
        if isinstance(v, (list, dict)):
            row[k] = json.dumps(v)
        if isinstance(v, datetime):  # stored as naive UTC (UTCDateTime)
            naive = v.astimezone(UTC).replace(tzinfo=None)
            sqlite = conn.dialect.name == "sqlite"
            row[k] = naive.strftime("%Y-%m-%d %H:%M:%S.%f") if sqlite else naive
    names = ", ".join(f'"{k}"' for k in row)
    params = ", ".join(f":{k}" for k in row)
    await conn.execute(sa.text(f'INSERT INTO "{table}" ({names}) VALUES ({params})'), row)


AGENTS = (
    "agent-00000000-0000-0000-0000-00000000000a",
    "agent-00000000-0000-0000-0000-00000000000b",
)


async def _old_release_data(url: str) -> dict[str, list[str]]:
    """Agents with blocks, messages (tagged and untagged) and sleeptime state; returns each
    agent's message ids in the order they were written."""
    engine = create_async_engine(url)
    order: dict[str, list[str]] = {}
    try:
        async with engine.begin() as conn:
            seq = 0
            for n, agent in enumerate(AGENTS):
                await _insert(
                    conn,
                    "agents",
                    id=agent,
                    name=f"old-{n}",
                    system="You are helpful.",
                    model="scripted/demo",
                    embedding="local/all-MiniLM-L6-v2",
                    tags=[],
                    tool_names=[],
                    metadata={},
                    created_at=T0,
                    updated_at=T0,
                )
                for label, value in (("persona", "I am old."), ("human", f"Name: Old{n}")):
                    await _insert(
                        conn,
                        "blocks",
                        id=f"block-{label}-{n}",
                        agent_id=agent,
                        label=label,
                        value=value,
                        limit=5000,
                        version=1,
                        created_at=T0,
                        updated_at=T0,
                    )
                await _insert(
                    conn,
                    "conversations",
                    id=f"call-{n}",
                    agent_id=agent,
                    source="voice",
                    created_at=T0,
                    last_active_at=T0,
                )
                order[agent] = []
                for i in range(6):
                    seq += 1
                    mid = f"message-{n}-{i}"
                    await _insert(
                        conn,
                        "messages",
                        seq=seq,
                        id=mid,
                        agent_id=agent,
                        conversation_id=f"call-{n}" if i % 2 else None,
                        role="user" if i % 2 == 0 else "assistant",
                        kind="message",
                        content=f"old words {n}-{i}",
                        tool_calls=[],
                        in_context=True,
                        created_at=T0 + timedelta(seconds=seq),
                    )
                    order[agent].append(mid)
                await _insert(
                    conn,
                    "sleeptime_state",
                    agent_id=agent,
                    pending_turns=1,
                    pending_events=[{"id": "evt-old", "user": "hi", "agent": "hello"}],
                    runs=3,
                )
    finally:
        await engine.dispose()
    return order


async def _check(url: str, order: dict[str, list[str]]) -> None:
    memory = await Memory.open(url)
    try:
        for n, agent in enumerate(AGENTS):
            conv = default_conversation_id(agent)
            assert (await memory.conversations.get(conv, agent)).agent_id == agent
            ids = await memory.conversations.in_context_ids(conv)
            assert ids == order[agent]  # all of them, in the order they were written
            human = await memory.blocks.get(agent, "human")
            assert human.scope == "caller" and human.value == f"Name: Old{n}"
            assert (await memory.blocks.get(agent, "persona")).scope == "agent"
            # a new caller gets their own copy of the template
            ident = await memory.identities.resolve(None, f"+1555000000{n}", agent_id=agent)
            assert await memory.blocks.ensure_caller_copies(agent, ident.id) >= 1
            own = await memory.blocks.get(agent, "human", ident.id)
            assert own.identity_id == ident.id and own.id != human.id
            assert own.value == f"Name: Old{n}"
            # the agent and its default conversation still take turns: the stored history
            agent_data, conv_data = await memory.turn_state(agent, conv)
            assert conv_data.id == conv and agent_data.id == agent
        async with memory.db.read() as s:
            rows = (
                await s.execute(sa.text("SELECT agent_id, identity_id, runs FROM sleeptime_state"))
            ).all()
        assert sorted((a, i, r) for a, i, r in rows) == [(a, "", 3) for a in AGENTS]
    finally:
        await memory.close()


def test_a_previous_release_database_upgrades(db_url: str) -> None:
    cfg = alembic_config(db_url)
    command.upgrade(cfg, "0004")
    order = asyncio.run(_old_release_data(db_url))
    command.upgrade(cfg, "head")
    asyncio.run(_check(db_url, order))
