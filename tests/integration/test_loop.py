"""The one agent loop against real databases and a loopback OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest

from agents.compiled import Compiled
from agents.context import Mode, message_tokens, order_context, to_openai
from agents.events import MessageSaved, RunDone, TextDelta, ToolArgsDelta, ToolCallReady, ToolResult
from agents.llm import LLMRegistry, LLMRequest
from agents.llm.base import LLMChunk
from agents.llm.scripted import ScriptedProvider
from agents.loop import AgentLoop, LoopConfig, TurnInput
from agents.tools import BASE_TOOLS
from agents.voice import VOICE
from memory.ids import default_conversation_id
from memory.models import BlockSpec, MessageData
from memory.service import Memory
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    mem = await Memory.open(db_url)
    yield mem
    await mem.close()


async def make_agent(memory: Memory, model: str = "openai/fake", human: str = "") -> str:
    agent = await memory.agents.create(
        user_id=None,
        name="t",
        system="",
        model=model,
        embedding="local/all-minilm-l6-v2",
        tool_names=BASE_TOOLS,
        blocks=[
            BlockSpec(label="persona", value="A test agent."),
            BlockSpec(label="human", value=human),
        ],
    )
    return agent.id


def loop_for(memory: Memory, base_url: str | None, **config: int) -> AgentLoop:
    llms = LLMRegistry(openai_api_key="test-key", openai_base_url=base_url)
    return AgentLoop(memory, llms, config=LoopConfig(**config))


async def collect(loop: AgentLoop, agent_id: str, inp: TurnInput) -> list[object]:
    async with aclosing(loop.run(agent_id, inp)) as events:
        return [e async for e in events]


async def test_streamed_tool_call_is_accumulated_and_executed(
    memory: Memory, fake_llm: FakeLLM, fake_llm_url: str
) -> None:
    agent_id = await make_agent(memory)
    fake_llm.push(
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "archival_memory_insert",
                    {"content": "The user owns a red bicycle.", "tags": ["bike"]},
                    fragments=5,
                )
            ]
        ),
        Reply(text="Noted, I stored that."),
    )
    events = await collect(
        loop_for(memory, fake_llm_url), agent_id, TurnInput("I own a red bicycle")
    )
    frags = [e for e in events if isinstance(e, ToolArgsDelta)]
    assert len(frags) >= 5 and json.loads(frags[-1].arguments)["tags"] == ["bike"]
    ready = next(e for e in events if isinstance(e, ToolCallReady))
    assert ready.name == "archival_memory_insert"
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.ok, result.result
    done = events[-1]
    assert isinstance(done, RunDone) and done.stop_reason == "end_turn" and done.steps == 2
    assert done.usage.total_tokens > 0
    hits = await memory.archival.search(agent_id, "what bicycle does the user have", 3)
    assert hits and "red bicycle" in hits[0].text
    stored = await memory.messages.page(agent_id, order="asc")
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls[0].name == "archival_memory_insert"
    assert stored[3].content == "Noted, I stored that."
    # the second LLM request carried the tool call and its result
    second = fake_llm.requests[1]["messages"]
    assert (
        second[-1]["role"] == "tool"
        and second[-2]["tool_calls"][0]["function"]["name"] == "archival_memory_insert"
    )
    pending = await memory.outbox.pending()
    assert len(pending) == 1 and pending[0][1].agent_text == "Noted, I stored that."


async def test_max_steps_stops_a_tool_loop(
    memory: Memory, fake_llm: FakeLLM, fake_llm_url: str
) -> None:
    agent_id = await make_agent(memory)
    fake_llm.responder = lambda body: Reply(
        tool_calls=[ToolCallSpec("conversation_search", {"query": "x"})]
    )
    events = await collect(
        loop_for(memory, fake_llm_url, max_steps=3), agent_id, TurnInput("loop forever")
    )
    done = events[-1]
    assert isinstance(done, RunDone) and done.stop_reason == "max_steps" and done.steps == 3
    assert len(fake_llm.requests) == 3


async def test_llm_down_gives_llm_api_error_and_keeps_history(memory: Memory) -> None:
    agent_id = await make_agent(memory)
    loop = loop_for(memory, "http://127.0.0.1:9/v1")
    events = await collect(loop, agent_id, TurnInput("hello?"))
    done = events[-1]
    assert isinstance(done, RunDone) and done.stop_reason == "llm_api_error" and done.error
    stored = await memory.messages.page(agent_id, order="asc")
    assert [m.content for m in stored] == ["hello?"]
    assert (await memory.agents.get(agent_id)).id == agent_id


async def test_garbage_mid_stream_keeps_partial_text(
    memory: Memory, fake_llm: FakeLLM, fake_llm_url: str
) -> None:
    agent_id = await make_agent(memory)
    fake_llm.push(Reply(text="one two three four five six", garbage_after=4))
    events = await collect(loop_for(memory, fake_llm_url), agent_id, TurnInput("count"))
    done = events[-1]
    assert isinstance(done, RunDone) and done.stop_reason == "llm_api_error"
    stored = await memory.messages.page(agent_id, order="asc")
    assert stored[-1].role == "assistant" and stored[-1].content.startswith("one two")
    assert not stored[-1].truncated


async def test_cancellation_persists_what_was_produced(
    memory: Memory, fake_llm: FakeLLM, fake_llm_url: str
) -> None:
    agent_id = await make_agent(memory)
    fake_llm.push(Reply(text=" ".join(f"word{i}" for i in range(200)), chunk_delay_s=0.02))
    loop = loop_for(memory, fake_llm_url)
    seen: list[str] = []

    async def consume() -> None:
        async with aclosing(loop.run(agent_id, TurnInput("talk a lot"))) as events:
            async for e in events:
                if isinstance(e, TextDelta):
                    seen.append(e.text)

    task = asyncio.create_task(consume())
    while len(seen) < 5:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await memory.messages.page(agent_id, order="asc")
    assert stored[-1].role == "assistant" and stored[-1].truncated
    assert stored[-1].content.startswith("word0 word1 word2 word3")
    assert len(stored[-1].content.split()) < 200
    for _ in range(100):  # the server sees the client go away
        if fake_llm.cancelled:
            break
        await asyncio.sleep(0.02)
    assert fake_llm.cancelled >= 1
    assert len(await memory.outbox.pending()) == 1


async def test_bad_tool_arguments_are_reported_to_the_model(
    memory: Memory, fake_llm: FakeLLM, fake_llm_url: str
) -> None:
    agent_id = await make_agent(memory)
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("archival_memory_search", '{"query": "x", "top_k": ')]),
        Reply(tool_calls=[ToolCallSpec("no_such_tool", {})]),
        Reply(text="ok"),
    )
    events = await collect(loop_for(memory, fake_llm_url), agent_id, TurnInput("x"))
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [r.ok for r in results] == [False, False]
    assert "invalid JSON" in results[0].result and "unknown tool" in results[1].result
    assert isinstance(events[-1], RunDone) and events[-1].stop_reason == "end_turn"


async def test_scripted_model_greets_by_name_and_recalls(memory: Memory) -> None:
    agent_id = await make_agent(memory, model="scripted/demo", human="Name: Alice\nLocation: Paris")
    loop = loop_for(memory, None)
    events = await collect(loop, agent_id, TurnInput("Hello there"))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "Alice" in text and "offline demo model" in text
    events = await collect(loop, agent_id, TurnInput("Where do I live?"))
    assert "Paris" in "".join(e.text for e in events if isinstance(e, TextDelta))
    await memory.archival.insert(agent_id, ["The user's dog is named Biscuit."])
    events = await collect(loop, agent_id, TurnInput("Do you remember my dog?"))
    assert any(isinstance(e, ToolCallReady) and e.name == "search_memory" for e in events)
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "Biscuit" in answer


async def test_voice_mode_tools_and_filler_argument(memory: Memory) -> None:
    agent_id = await make_agent(memory, model="scripted/demo")
    loop = loop_for(memory, None)
    agent = await memory.agents.get(agent_id)
    tools = loop.tools_for(agent, VOICE)
    assert tools[0].name == "search_memory"
    assert all(t.voice_safe for t in tools)
    assert not {"core_memory_append", "archival_memory_insert"} & {t.name for t in tools}
    schema = tools[0].schema(voice=True)["function"]["parameters"]
    assert "pre_exec_msg" in schema["properties"]
    events = await collect(
        loop, agent_id, TurnInput("Do you remember what I told you?", mode=VOICE)
    )
    ready = next(e for e in events if isinstance(e, ToolCallReady))
    assert ready.pre_exec_msg and "pre_exec_msg" not in ready.arguments


async def test_prompt_is_rebuilt_only_when_a_block_changes(memory: Memory) -> None:
    agent_id = await make_agent(memory, model="scripted/demo")
    loop = loop_for(memory, None)
    await collect(loop, agent_id, TurnInput("one"))
    builds = loop.prompts.builds
    await collect(loop, agent_id, TurnInput("two"))
    assert loop.prompts.builds == builds
    await memory.blocks.set_value(agent_id, "human", "Name: Bob", actor="user")
    events = await collect(loop, agent_id, TurnInput("hi"))
    assert loop.prompts.builds == builds + 1
    assert "Bob" in "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_context_window_is_summarized(memory: Memory) -> None:
    agent_id = await make_agent(memory, model="scripted/demo")
    loop = loop_for(memory, None, context_token_budget=900)
    for i in range(30):
        await collect(
            loop,
            agent_id,
            TurnInput(f"Message number {i}: my favourite number today is {i * 7}. " * 2),
        )
    in_ctx = await memory.messages.in_context(default_conversation_id(agent_id))
    summaries = [m for m in in_ctx if m.kind == "summary"]
    assert len(summaries) == 1 and "Summary of earlier conversation" in summaries[0].content
    assert loop.summarizer.runs >= 1
    assert len(in_ctx) < 60
    assert await memory.messages.count(agent_id) > 60  # recall keeps everything


async def test_concurrent_block_edits_both_land(memory: Memory) -> None:
    agent_id = await make_agent(memory)

    async def append(fact: str) -> None:
        await memory.blocks.modify(
            agent_id, "human", lambda v: f"{v}\n{fact}".strip(), actor="agent"
        )

    await asyncio.gather(*(append(f"fact {i}") for i in range(10)))
    block = await memory.blocks.get(agent_id, "human")
    assert all(f"fact {i}" in block.value for i in range(10))
    assert block.version == 11
    assert len(await memory.blocks.history(agent_id, "human")) == 10


async def test_message_saved_events_match_storage(memory: Memory) -> None:
    agent_id = await make_agent(memory, model="scripted/demo")
    events = await collect(loop_for(memory, None), agent_id, TurnInput("just saying hi"))
    saved = [e.message.id for e in events if isinstance(e, MessageSaved)]
    stored = [m.id for m in await memory.messages.page(agent_id, order="asc")]
    assert saved == stored


async def test_context_cache_sees_writes_from_another_process(db_url: str) -> None:
    """Two Memory objects on one database stand for two gateway processes: the context window
    one of them cached must reflect what the other appended or truncated since."""
    a, b = await Memory.open(db_url), await Memory.open(db_url, migrate=False)
    try:
        agent_id = await make_agent(a, model="scripted/demo")
        loop_a = loop_for(a, None)
        await collect(loop_a, agent_id, TurnInput("my name is Ada"))
        await a.agents.get(agent_id)
        first = await a.messages.in_context(
            default_conversation_id(agent_id),
            (await a.conversations.get(default_conversation_id(agent_id))).messages_version,
        )
        assert (
            a.messages.cache.get(
                default_conversation_id(agent_id),
                (await a.conversations.get(default_conversation_id(agent_id))).messages_version,
            )
            is not None
        )  # cached
        assert [m.role for m in first] == ["user", "assistant"]
        # process B takes a turn: A's cached window is stale and must not be used
        await collect(loop_for(b, None), agent_id, TurnInput("I live in Oslo"))
        await a.agents.get(agent_id)
        window = await a.messages.in_context(
            default_conversation_id(agent_id),
            (await a.conversations.get(default_conversation_id(agent_id))).messages_version,
        )
        assert [m.content for m in window if m.role == "user"] == [
            "my name is Ada",
            "I live in Oslo",
        ]
        # B truncates A's assistant message (a barge-in handled there): A sees the cut text
        reply = next(m for m in window if m.role == "assistant")
        await b.finish_turn(None, {reply.id: "Nice"})
        await a.agents.get(agent_id)
        window = await a.messages.in_context(
            default_conversation_id(agent_id),
            (await a.conversations.get(default_conversation_id(agent_id))).messages_version,
        )
        assert next(m for m in window if m.id == reply.id).content == "Nice"
        # A's own turn extends its cache in place (no re-read), and the result matches storage
        await collect(loop_a, agent_id, TurnInput("thanks"))
        cached = a.messages.cache.get(
            default_conversation_id(agent_id),
            (await a.conversations.get(default_conversation_id(agent_id))).messages_version,
        )
        assert cached is not None
        stored = await b.messages.in_context(default_conversation_id(agent_id))
        assert [(m.id, m.content) for m in cached] == [(m.id, m.content) for m in stored]
    finally:
        await a.close()
        await b.close()


class RecordingScripted(ScriptedProvider):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[LLMRequest] = []

    def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        self.requests.append(req)
        return super()._stream(req)


async def test_compiled_context_equals_a_scratch_build_over_many_turns(
    memory: Memory, db_url: str
) -> None:
    """Each step's history extends the agent's previous compilation (agents.compiled). Over
    turns with tool calls, truncations, a block edit and summaries it must equal a from-scratch
    conversion, and a cold loop (another process) must send the same request as the warm one."""
    agent_id = await make_agent(memory, model="scripted/demo")
    loop = loop_for(memory, None, context_token_budget=900)
    compile_ = loop.contexts.compile
    sizes: list[int] = []
    wrong: list[int] = []  # an assert in here would end the turn as an "error" RunDone
    replies: list[MessageData] = []

    def checked(key: str, context: list[MessageData]) -> Compiled:
        got = compile_(key, context)
        scratch = (to_openai(context), sum(message_tokens(m) for m in context))
        if (got.openai, got.tokens) != scratch:
            wrong.append(len(sizes))
        sizes.append(len(context))
        return got

    loop.contexts.compile = checked  # type: ignore[assignment]
    for i in range(24):
        text = f"Message {i}: my number is {i * 7}."
        if i % 5 == 2:
            text = f"Do you remember message {i}?"  # a search_memory call, then an answer
        events = await collect(loop, agent_id, TurnInput(text))
        done = events[-1]
        assert isinstance(done, RunDone) and done.stop_reason == "end_turn", done
        replies += [
            e.message
            for e in events
            if isinstance(e, MessageSaved) and e.message.role == "assistant" and e.message.content
        ]
        if i % 7 == 3:  # cut to what the caller heard: this reply and one compiled already
            cut = {m.id: m.content[:5] for m in (replies[-1], replies[-3])}
            await memory.finish_turn(None, cut)
        if i == 10:
            await memory.blocks.set_value(agent_id, "human", "Name: Bob", actor="user")
    assert not wrong and loop.summarizer.runs >= 1 and max(sizes) > 20
    assert loop.contexts.extended > loop.contexts.full > 2
    probe = Mode("probe", persist=False)
    loop.config.context_token_budget = 10**6  # the probe must not summarize (that is stored)
    warm, cold_provider = RecordingScripted(), RecordingScripted()
    loop.llms.overrides["scripted"] = warm
    cold_memory = await Memory.open(db_url, migrate=False)
    try:
        cold = loop_for(cold_memory, None, context_token_budget=10**6)
        cold.llms.overrides["scripted"] = cold_provider
        for lp in (loop, cold):
            await collect(lp, agent_id, TurnInput("Do you remember my number?", mode=probe))
        assert len(warm.requests) == len(cold_provider.requests) == 2  # a tool call, an answer
        for a, b in zip(warm.requests, cold_provider.requests, strict=True):
            assert a.messages == b.messages
        window = order_context(
            await cold_memory.messages.in_context(default_conversation_id(agent_id))
        )
        assert warm.requests[0].messages[1:-1] == to_openai(window)
    finally:
        await cold_memory.close()
