"""`SleeptimeAgent.note_pending`: the in-process bus records a drain's turns that make no
rewrite due in one transaction, and leaves the rest to `handle`, in order, per agent and
caller; the outcome is what `handle`, event by event, would have stored."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from itertools import count

import pytest
from sqlalchemy import select

from agents.llm import LLMRegistry
from agents.loop import AgentLoop
from agents.sleeptime import SleeptimeAgent
from memory.models import BlockSpec, TranscriptEvent
from memory.orm import ProcessedEvent, SleeptimeState
from memory.service import Memory

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_seq = count()


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    memory = await Memory.open(db_url)
    yield memory
    await memory.close()


async def new_agent(memory: Memory) -> str:
    made = await memory.agents.create(
        user_id=None,
        name="batched",
        system="",
        model="scripted/demo",
        embedding="local/all-minilm-l6-v2",
        blocks=[BlockSpec(label="human", value="")],
    )
    return made.id


def turn(agent_id: str, text: str, *, ended: bool = False) -> TranscriptEvent:
    at = T0 + timedelta(seconds=next(_seq))
    return TranscriptEvent(
        event_id=f"evt-{uuid.uuid4()}",
        agent_id=agent_id,
        turn_id=f"turn-{uuid.uuid4()}",
        source="voice",
        user_text=text,
        agent_text="Noted.",
        agent_text_heard="Noted.",
        started_at=at,
        ended_at=at,
        call_ended=ended,
    )


async def stored(memory: Memory) -> tuple[set[str], dict[str, tuple[int, list[str]]]]:
    """The processed event ids, and per agent its pending turn count and texts."""
    async with memory.db.read() as s:
        done = set(await s.scalars(select(ProcessedEvent.event_id)))
        states = {
            st.agent_id: (st.pending_turns, [p["user"] for p in st.pending_events])
            for st in await s.scalars(select(SleeptimeState))
        }
    return done, states


async def test_one_transaction_records_what_handle_would_and_leaves_due_turns(
    memory: Memory,
) -> None:
    a, b = await new_agent(memory), await new_agent(memory)
    agent = SleeptimeAgent(memory, AgentLoop(memory, LLMRegistry()), every_turns=3)
    a1, b1, a2, a3, b2, a4 = (
        turn(a, "a1"),
        turn(b, "b1"),
        turn(a, "a2"),
        turn(a, "a3"),  # the third of a: a rewrite is due
        turn(b, "b2"),
        turn(a, "a4"),  # after a3: handle() must see it after a3's rewrite
    )
    ghost = turn("agent-that-is-not-there", "hello")
    left = await agent.note_pending([a1, b1, a2, a3, b2, ghost, a4])
    assert left == [a3, a4]
    done, states = await stored(memory)
    assert done == {a1.event_id, b1.event_id, a2.event_id, b2.event_id, ghost.event_id}
    assert states == {a: (2, ["a1", "a2"]), b: (2, ["b1", "b2"])}

    # again (a redelivered drain): nothing is recorded twice, the due turns are still left
    assert await agent.note_pending([a1, b1, a3, a4]) == [a3, a4]
    assert (await stored(memory))[1] == states


async def test_a_call_end_is_left_to_handle(memory: Memory) -> None:
    a = await new_agent(memory)
    agent = SleeptimeAgent(memory, AgentLoop(memory, LLMRegistry()), every_turns=5)
    first, last = turn(a, "hi"), turn(a, "bye", ended=True)
    assert await agent.note_pending([first, last]) == [last]
    assert (await stored(memory))[1] == {a: (1, ["hi"])}
