"""The sleeptime agent with a scripted plan of memory tool calls (an LLMProvider subclass):
which blocks it may edit, one version per block per rewrite, all-or-nothing commits, and the
worker's housekeeping of consumers that are gone."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from agents.llm import LLMChunk, LLMError, LLMProvider, LLMRegistry, LLMRequest, ToolCallDelta
from agents.loop import AgentLoop
from agents.sleeptime import SleeptimeAgent
from memory.ids import utcnow
from memory.models import BlockSpec, TranscriptEvent
from memory.orm import ProcessedEvent
from memory.service import Memory
from transcripts.bus import GROUP, STREAM, RedisStreamsBus
from transcripts.worker import SleeptimeWorker

Plan = list[list[tuple[str, dict[str, Any]]]]


class PlannedModel(LLMProvider):
    """Step n answers with plan[n]'s tool calls (then memory_finish_edits); `fail_at` step
    raises instead, as a model endpoint that went down mid-run."""

    name = "planned"

    def __init__(self, plan: Plan, fail_at: int | None = None) -> None:
        super().__init__(retries=0)
        self.plan, self.fail_at = plan, fail_at
        self.requests: list[LLMRequest] = []

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.requests.append(req)
        step = sum(1 for m in req.messages if m["role"] == "assistant")
        if step == self.fail_at:
            raise LLMError(self.name, "the model went away")
        calls = self.plan[step] if step < len(self.plan) else [("memory_finish_edits", {})]
        for i, (name, args) in enumerate(calls):
            yield LLMChunk(
                tool_calls=[ToolCallDelta(i, f"call-{step}-{i}", name, json.dumps(args))]
            )
        yield LLMChunk(finish_reason="tool_calls")


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    memory = await Memory.open(db_url)
    yield memory
    await memory.close()


async def make_agent(memory: Memory) -> str:
    agent = await memory.agents.create(
        user_id=None,
        name="planned",
        system="",
        model="openai/planned",
        embedding="local/all-minilm-l6-v2",
        blocks=[
            BlockSpec(label="persona", value="I am helpful."),
            BlockSpec(label="human", value=""),
            BlockSpec(label="notes", value="old plan", sleeptime_editable=True),
        ],
    )
    return agent.id


def turn(agent_id: str, text: str) -> TranscriptEvent:
    now = utcnow()
    return TranscriptEvent(
        event_id=f"evt-{uuid.uuid4()}",
        agent_id=agent_id,
        turn_id=f"turn-{uuid.uuid4()}",
        source="text",
        user_text=text,
        agent_text="Sure.",
        agent_text_heard="Sure.",
        started_at=now,
        ended_at=now,
    )


def sleeptime(memory: Memory, model: PlannedModel) -> SleeptimeAgent:
    llms = LLMRegistry()
    llms.overrides["openai"] = model  # the agent's openai/planned model is this plan
    return SleeptimeAgent(memory, AgentLoop(memory, llms), every_turns=1)


async def test_a_rewrite_edits_only_what_it_may_and_commits_once(memory: Memory) -> None:
    agent_id = await make_agent(memory)
    model = PlannedModel(
        [
            [
                ("memory_rethink", {"label": "human", "new_memory": "Name: Ada"}),
                ("memory_insert", {"label": "human", "new_str": "Likes: tea"}),
                ("memory_replace", {"label": "notes", "old_str": "old", "new_str": "new"}),
                ("memory_rethink", {"label": "persona", "new_memory": "I am evil."}),
                ("archival_memory_insert", {"content": "Ada likes tea."}),
                ("archival_memory_insert", {"content": "Ada likes tea."}),
            ]
        ]
    )
    result = await sleeptime(memory, model).handle(turn(agent_id, "I'm Ada and I like tea."))
    assert result.outcome == "ran"

    blocks = {b.label: b for b in await memory.blocks.all(agent_id)}
    assert blocks["human"].value == "Name: Ada\nLikes: tea"
    assert blocks["human"].version == 2  # two edits, one committed version
    assert blocks["notes"].value == "new plan" and blocks["notes"].version == 2
    assert blocks["persona"].value == "I am helpful." and blocks["persona"].version == 1
    refused = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert any("not editable by the sleeptime agent" in m["content"] for m in refused)
    # the model saw its own staged edit before the commit
    assert "Likes: tea" in model.requests[1].messages[0]["content"]
    [change] = await memory.blocks.history(agent_id, "human")
    assert (change.actor, change.old_value, change.version) == ("sleeptime", "", 2)
    assert await memory.archival.count(agent_id) == 1  # the repeated insert is stored once


async def test_a_failed_rewrite_leaves_nothing_and_its_retry_applies_once(memory: Memory) -> None:
    agent_id = await make_agent(memory)
    plan: Plan = [
        [
            ("memory_rethink", {"label": "human", "new_memory": "Name: Ada"}),
            ("archival_memory_insert", {"content": "Ada said hello."}),
        ],
        [("memory_insert", {"label": "human", "new_str": "Mood: fine"})],
    ]
    event = turn(agent_id, "Hello, I'm Ada.")
    with pytest.raises(RuntimeError, match="the model went away"):
        await sleeptime(memory, PlannedModel(plan, fail_at=2)).handle(event)
    human = await memory.blocks.get(agent_id, "human")
    assert (human.value, human.version) == ("", 1)  # the first step's edits were not kept
    assert await memory.archival.count(agent_id) == 0
    async with memory.db.read() as s:
        assert await s.get(ProcessedEvent, event.event_id) is None  # so it will be redelivered

    again = sleeptime(memory, PlannedModel(plan))
    assert (await again.handle(event)).outcome == "ran"
    assert (await again.handle(event)).outcome == "duplicate"
    human = await memory.blocks.get(agent_id, "human")
    assert (human.value, human.version) == ("Name: Ada\nMood: fine", 2)
    assert await memory.archival.count(agent_id) == 1


async def test_a_worker_forgets_idle_consumers_that_hold_nothing(
    memory: Memory, redis_url: str
) -> None:
    client = aioredis.Redis.from_url(redis_url)
    bus = RedisStreamsBus(client)
    await bus.ensure_group()
    await client.xgroup_createconsumer(STREAM, GROUP, "gone-1234")  # a worker long gone
    await bus.publish([turn("agent-x", "hi")])
    await client.xreadgroup(GROUP, "busy-1", {STREAM: ">"}, count=1)  # holds one entry
    await asyncio.sleep(0.05)
    worker = SleeptimeWorker(
        bus, sleeptime(memory, PlannedModel([])), consumer="new", forget_idle_ms=10
    )
    stop = asyncio.Event()
    stop.set()  # start, tidy up, stop
    await worker.run(stop)
    names = {c["name"].decode() for c in await client.xinfo_consumers(STREAM, GROUP)}
    assert "gone-1234" not in names and "busy-1" in names
    await client.aclose()
