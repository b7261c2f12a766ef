"""Turn locks are per conversation, also across instances (Redis leases): turns of two
conversations of ONE agent run at once; two turns of one conversation never do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agents.llm import LLMRegistry
from agents.loop import AgentLoop, LoopConfig, TurnInput
from memory.service import Memory
from tests.integration.test_loop import collect, make_agent
from tests.support.fake_llm import FakeLLM, Reply
from transcripts.locks import RedisLocks

SLOW = 3.0  # the model's time to first token: far longer than it takes a request to arrive


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    mem = await Memory.open(db_url)
    yield mem
    await mem.close()


@pytest.fixture
async def instances(
    memory: Memory, redis_url: str, fake_llm_url: str
) -> AsyncIterator[tuple[AgentLoop, AgentLoop]]:
    """Two agent loops with their own Redis clients: two gateway instances."""
    clients = [aioredis.Redis.from_url(redis_url) for _ in range(2)]
    loops = tuple(
        AgentLoop(
            memory,
            LLMRegistry(openai_api_key="k", openai_base_url=fake_llm_url),
            config=LoopConfig(),
            locks=RedisLocks(c),
        )
        for c in clients
    )
    yield loops[0], loops[1]
    for c in clients:
        await c.aclose()


async def _arrivals(fake_llm: FakeLLM, count: int, within_s: float) -> int:
    deadline = asyncio.get_running_loop().time() + within_s
    while len(fake_llm.requests) < count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    return len(fake_llm.requests)


async def test_two_conversations_of_one_agent_run_at_once(
    memory: Memory, fake_llm: FakeLLM, instances: tuple[AgentLoop, AgentLoop]
) -> None:
    fake_llm.responder = lambda body: Reply(text="ok", ttft_s=SLOW)
    agent_id = await make_agent(memory)
    a = await memory.conversations.create(agent_id)
    b = await memory.conversations.create(agent_id)
    turns = [
        asyncio.create_task(
            collect(instances[0], agent_id, TurnInput("one", conversation_id=a.id))
        ),
        asyncio.create_task(
            collect(instances[1], agent_id, TurnInput("two", conversation_id=b.id))
        ),
    ]
    # both requests reach the model while the first is still waiting for its first token: a
    # per-agent lock would hold the second turn until the first one ended
    assert await _arrivals(fake_llm, 2, SLOW - 0.5) == 2
    assert not any(t.done() for t in turns)
    await asyncio.gather(*turns)
    contents = [
        [m["content"] for m in r["messages"] if m["role"] == "user"] for r in fake_llm.requests
    ]
    assert sorted(c[-1] for c in contents) == ["one", "two"]
    assert all(len(c) == 1 for c in contents)  # neither saw the other conversation's words


async def test_two_turns_of_one_conversation_take_turns(
    memory: Memory, fake_llm: FakeLLM, instances: tuple[AgentLoop, AgentLoop]
) -> None:
    fake_llm.responder = lambda body: Reply(text="ok", ttft_s=SLOW / 2)
    agent_id = await make_agent(memory)
    conv = await memory.conversations.create(agent_id)
    first = asyncio.create_task(
        collect(instances[0], agent_id, TurnInput("first", conversation_id=conv.id))
    )
    assert await _arrivals(fake_llm, 1, SLOW) == 1
    second = asyncio.create_task(
        collect(instances[1], agent_id, TurnInput("second", conversation_id=conv.id))
    )
    assert await _arrivals(fake_llm, 2, SLOW / 4) == 1  # the other instance waits for the lease
    await asyncio.gather(first, second)
    last = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] != "system"]
    assert last[:3] == ["first", "ok", "second"]  # the second turn saw the first one whole
