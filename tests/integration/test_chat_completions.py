"""`POST /v1/chat/completions` with model = agent id, driven by the real openai SDK
(AsyncOpenAI(base_url=...)) against a live gateway; the agent's own LLM is the loopback fake."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import redis
from openai import AsyncOpenAI

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec, default_responder
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.services import RedisServer

ANSWER = "Green tea is a fine choice for the afternoon."
RECALL = "You told me you love green tea."
FILLER = "Let me check my notes."
# what Vapi's custom LLM and LiveKit add to an OpenAI request; accepted and ignored
PLATFORM_FIELDS: dict[str, Any] = {
    "call": {"id": "call-vapi-123", "orgId": "org-1", "type": "webCall"},
    "metadata": {"source": "vapi"},
    "phoneNumber": {"number": "+15005550006"},
    "customer": {"number": "+14155550100"},
    "parallel_tool_calls": False,
    "num_retries": 2,
}


@dataclass
class CC:
    server: ServerThread
    llm: FakeLLM
    http: httpx.Client
    redis_url: str

    def agent(self, **body: Any) -> str:
        body.setdefault("model", "openai/fake")
        resp = self.http.post("/v1/agents/", json=body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def client(self) -> AsyncOpenAI:
        return AsyncOpenAI(base_url=f"{self.server.url}/v1", api_key="unused", max_retries=0)

    def messages(self, agent_id: str) -> list[dict[str, Any]]:
        resp = self.http.get(f"/v1/agents/{agent_id}/messages", params={"order": "asc"})
        return list(resp.json())

    async def transcripts(self, agent_id: str, n: int) -> list[dict[str, Any]]:
        client = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + 15
        try:
            while True:
                events = [json.loads(f[b"event"]) for _, f in client.xrange("vg:transcripts")]
                mine = [e for e in events if e["agent_id"] == agent_id]
                if len(mine) >= n or time.monotonic() > deadline:
                    return mine
                await asyncio.sleep(0.05)
        finally:
            client.close()


@pytest.fixture(scope="module")
def stack(
    fake_llm_server: tuple[FakeLLM, ServerThread],
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CC]:
    if redis_server.proc is None:
        redis_server.start()
    llm, llm_srv = fake_llm_server
    db = tmp_path_factory.mktemp("cc") / "vg.db"
    with (
        running_gateway(
            f"sqlite+aiosqlite:///{db}",
            openai_base_url=f"{llm_srv.url}/v1",
            openai_api_key="test",
            redis_url=redis_server.url,
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as http,
    ):
        yield CC(srv, llm, http, redis_server.url)


@pytest.fixture
def cc(stack: CC) -> CC:
    stack.llm.queue.clear()
    stack.llm.requests.clear()
    stack.llm.responder = default_responder
    return stack


async def test_streaming_with_the_openai_sdk(cc: CC) -> None:
    cc.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = cc.agent()
    stream = await cc.client().chat.completions.create(
        model=agent_id,
        messages=[
            {"role": "system", "content": "You are the platform's prompt; the agent has its own."},
            {"role": "user", "content": "An old question the agent already answered."},
            {"role": "assistant", "content": "An old answer."},
            {"role": "user", "content": "Which tea should I drink?"},
        ],
        stream=True,
        stream_options={"include_usage": True},
        temperature=0.3,
        tools=[{"type": "function", "function": {"name": "transfer_call", "parameters": {}}}],
        extra_body=PLATFORM_FIELDS,
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" and c.model == agent_id for c in chunks)
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == ANSWER
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # streamed
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == ["stop"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == len(ANSWER.split()) + 1  # what the fake LLM reported
    assert usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    # only the last user message was new input; the platform's prompt and tools were ignored
    (sent,) = cc.llm.requests
    assert usage.prompt_tokens == sum(len(m.get("content") or "") for m in sent["messages"]) // 4
    assert sent["messages"][-1] == {"role": "user", "content": "Which tea should I drink?"}
    assert "old question" not in json.dumps(sent) and "platform's prompt" not in json.dumps(sent)
    assert "transfer_call" not in {t["function"]["name"] for t in sent.get("tools", [])}
    stored = [(m["message_type"], m.get("content")) for m in cc.messages(agent_id)]
    assert stored[0][0] == "system_message"  # the agent's, from its creation
    assert stored[1:] == [
        ("user_message", "Which tea should I drink?"),
        ("assistant_message", ANSWER),
    ]
    (event,) = await cc.transcripts(agent_id, 1)
    assert event["source"] == "text" and event["agent_text"] == ANSWER
    assert event["user_text"] == "Which tea should I drink?"
    assert event["conversation_id"] == "call-vapi-123"  # Vapi's call id groups the turns


async def test_non_streaming_completion(cc: CC) -> None:
    cc.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = cc.agent()
    done = await cc.client().chat.completions.create(
        model=agent_id,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Tea advice, please."}]}],
        user="caller-42",
        extra_body=PLATFORM_FIELDS | {"call": None},
    )
    assert done.object == "chat.completion" and done.model == agent_id
    assert done.choices[0].message.role == "assistant"
    assert done.choices[0].message.content == ANSWER
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens == len(ANSWER.split()) + 1
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens
    assert cc.llm.requests[0]["messages"][-1]["content"] == "Tea advice, please."
    (event,) = await cc.transcripts(agent_id, 1)
    # OpenAI's `user` is the caller: the turn is in that caller's own conversation
    assert event["source"] == "text" and event["conversation_id"].startswith("conv-")
    assert event["identity_id"] and event["identity_id"].startswith("identity-")


def recall_replies() -> list[Reply]:
    search = {"pre_exec_msg": FILLER, "convo_keyword_queries": ["green tea"]}
    return [
        Reply(tool_calls=[ToolCallSpec("search_memory", search, fragments=5)]),
        Reply(text=RECALL),
    ]


async def test_memory_recall_streams_filler_before_the_answer(cc: CC) -> None:
    agent_id = cc.agent()
    cc.llm.responder = lambda body: Reply(text="Noted.")
    client = cc.client()
    await client.chat.completions.create(
        model=agent_id, messages=[{"role": "user", "content": "I really love green tea."}]
    )
    cc.llm.push(*recall_replies())
    stream = await client.chat.completions.create(
        model=agent_id,
        messages=[{"role": "user", "content": "What drink do I like?"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"voice": True},
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices]
    content = "".join(p or "" for p in pieces)
    assert content == f"{FILLER} {RECALL}"
    filler_at = next(i for i, p in enumerate(pieces) if p and FILLER in p)
    answer_at = next(i for i, p in enumerate(pieces) if p and "green" in p)
    assert filler_at < answer_at
    # voice mode: the voice tools with pre_exec_msg; the search found the earlier message
    first, second = cc.llm.requests[-2:]
    search = next(t for t in first["tools"] if t["function"]["name"] == "search_memory")
    assert "pre_exec_msg" in search["function"]["parameters"]["properties"]
    tool_msg = next(m for m in second["messages"] if m["role"] == "tool")
    found = json.loads(tool_msg["content"])["convo_keyword_search_results"]["green tea"]
    assert any("I really love green tea." in hit for hit in found)
    events = await cc.transcripts(agent_id, 2)
    assert [e["source"] for e in events] == ["text", "voice"]
    assert events[1]["agent_text"] == RECALL


async def test_voice_mode_follows_the_agent_default(cc: CC) -> None:
    agent_id = cc.agent(voice_default=True)
    client = cc.client()
    cc.llm.push(*recall_replies())
    done = await client.chat.completions.create(
        model=agent_id, messages=[{"role": "user", "content": "What drink do I like?"}]
    )
    assert done.choices[0].message.content == f"{FILLER} {RECALL}"
    assert done.usage is not None and done.usage.completion_tokens == 1 + len(RECALL.split()) + 1
    cc.llm.push(*recall_replies())
    done = await client.chat.completions.create(
        model=agent_id,
        messages=[{"role": "user", "content": "What drink do I like?"}],
        extra_body={"voice": False},
    )
    assert done.choices[0].message.content == RECALL  # text mode: no spoken filler


async def test_errors_in_openai_shape(cc: CC) -> None:
    client = cc.client()
    with pytest.raises(openai.NotFoundError) as nf:
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
        )
    err = nf.value.response.json()["error"]
    assert err["code"] == "model_not_found" and err["type"] == "invalid_request_error"
    assert "gpt-4o-mini" in err["message"]
    agent_id = cc.agent()
    for messages in (
        [{"role": "system", "content": "only a system prompt"}],
        [],
        [{"role": "user", "content": "   "}],
    ):
        with pytest.raises(openai.BadRequestError) as bad:
            await client.chat.completions.create(model=agent_id, messages=messages)  # type: ignore[arg-type]
        assert "user message" in bad.value.response.json()["error"]["message"]
    for body, needle in (
        (b"{not json", "not valid JSON"),
        (b'["a list"]', "model"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(), "model"),
    ):
        resp = cc.http.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert resp.status_code == 400
        assert needle in resp.json()["error"]["message"]
    assert not cc.llm.requests  # nothing reached the model


async def test_model_failure_is_an_openai_error(cc: CC) -> None:
    agent_id = cc.agent()
    client = cc.client()
    cc.llm.responder = lambda body: Reply(fail_status=500)  # every retry fails too
    with pytest.raises(openai.APIStatusError) as failed:
        await client.chat.completions.create(
            model=agent_id, messages=[{"role": "user", "content": "hi"}]
        )
    assert failed.value.status_code == 502
    assert failed.value.response.json()["error"]["type"] == "server_error"
    stream = await client.chat.completions.create(
        model=agent_id, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass
