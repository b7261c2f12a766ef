"""`Database.exchange` (read, decide, write in one transaction straight on the driver), on
SQLite and PostgreSQL: concurrent read-modify-writes of one row lose no update (SQLite's write
lock at BEGIN, PostgreSQL's FOR UPDATE), and a failing decision leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from memory.models import BlockSpec
from memory.raw import Row, Stmt
from memory.service import Memory

N = 20


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    mem = await Memory.open(db_url)
    yield mem
    await mem.close()


async def counter_row(memory: Memory) -> str:
    """An agent with a sleeptime_state row whose pending_turns is the counter."""
    agent = await memory.agents.create(
        user_id=None,
        name="counter",
        system="",
        model="openai/x",
        embedding="local/all-minilm-l6-v2",
        blocks=[BlockSpec(label="human", value="")],
    )
    await memory.db.batch(
        [
            Stmt(
                "INSERT INTO sleeptime_state (agent_id, identity_id, pending_turns, "
                "pending_events, runs) VALUES (?, '', 0, ?, 0)",
                [agent.id, []],
            )
        ],
        write=True,
    )
    return agent.id


def read(agent_id: str) -> list[Stmt]:
    return [
        Stmt(
            "SELECT pending_turns FROM sleeptime_state WHERE agent_id = ? AND identity_id = ''",
            [agent_id],
            returns=True,
            lock=True,
        )
    ]


def write(agent_id: str, value: int) -> Stmt:
    return Stmt(
        "UPDATE sleeptime_state SET pending_turns = ? WHERE agent_id = ? AND identity_id = ''",
        [value, agent_id],
    )


async def value(memory: Memory, agent_id: str) -> int:
    rows = await memory.db.batch(read(agent_id))
    return int(rows[0][0]["pending_turns"])


async def test_concurrent_exchanges_lose_no_update(memory: Memory) -> None:
    agent_id = await counter_row(memory)

    def plus_one(rows: list[list[Row]]) -> tuple[list[Stmt], int]:
        seen = int(rows[0][0]["pending_turns"])
        return [write(agent_id, seen + 1)], seen

    seen = await asyncio.gather(*(memory.db.exchange(read(agent_id), plus_one) for _ in range(N)))
    assert await value(memory, agent_id) == N
    assert sorted(seen) == list(range(N))  # each saw the one before it committed


async def test_a_failing_decision_leaves_nothing_behind(memory: Memory) -> None:
    agent_id = await counter_row(memory)

    def refuse(rows: list[list[Row]]) -> tuple[list[Stmt], None]:
        raise ValueError("no")

    with pytest.raises(ValueError):
        await memory.db.exchange(read(agent_id), refuse)

    def bad_write(rows: list[list[Row]]) -> tuple[list[Stmt], None]:
        # the first write is fine, the second breaks a constraint: both are rolled back
        return [write(agent_id, 7), Stmt("INSERT INTO agents (id) VALUES (NULL)")], None

    with pytest.raises(Exception):  # noqa: B017 - the driver's own integrity error
        await memory.db.exchange(read(agent_id), bad_write)
    assert await value(memory, agent_id) == 0
    # the connection is usable: no transaction was left open
    await memory.db.exchange(read(agent_id), lambda rows: ([write(agent_id, 3)], None))
    assert await value(memory, agent_id) == 3
