"""The official letta-client SDK against a live gateway on loopback, for every call of the
text API, with the loopback OpenAI-compatible LLM and with the offline scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from letta_client import Letta

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test")
    # strict: every response must validate against the SDK's own models (an unknown enum
    # value, a missing required field or a wrong type raises APIResponseValidationError)
    yield Letta(
        base_url=srv.url,
        api_key="any-key-on-loopback",
        timeout=60,
        _strict_response_validation=True,
    )


@pytest.mark.parametrize("model", ["openai/fake", "scripted/demo"])
def test_agent_lifecycle(client: Letta, model: str) -> None:
    assert client.health().status == "ok"
    agent = client.agents.create(
        name="librarian",
        model=model,
        tags=["books"],
        system="You help with books.",
        memory_blocks=[
            {"label": "persona", "value": "A librarian."},
            {"label": "human", "value": "Name: Ada", "limit": 300},
        ],
    )
    assert agent.model == model and agent.llm_config.handle == model
    assert {b.label for b in agent.memory.blocks} == {"persona", "human"}
    assert "search_memory" in {t.name for t in agent.tools}
    assert client.agents.retrieve(agent_id=agent.id).name == "librarian"
    client.agents.update(agent_id=agent.id, name="archivist", tags=["books", "old"])
    again = client.agents.retrieve(agent_id=agent.id)
    assert again.name == "archivist" and again.tags == ["books", "old"]
    assert agent.id in [a.id for a in client.agents.list()]
    assert [a.id for a in client.agents.list(tags=["old"])] == [agent.id]
    client.agents.delete(agent_id=agent.id)
    assert agent.id not in [a.id for a in client.agents.list()]


def test_messages_with_streamed_tool_calls(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(
        model="openai/fake", memory_blocks=[{"label": "human", "value": ""}]
    )
    fake_llm.push(
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "archival_memory_insert", {"content": "Ada reads Borges."}, fragments=4
                )
            ]
        ),
        Reply(text="Stored that for you."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Remember I read Borges"}]
    )
    types = [m.message_type for m in resp.messages]
    assert types == ["tool_call_message", "tool_return_message", "assistant_message"]
    assert resp.messages[0].tool_call.name == "archival_memory_insert"
    assert resp.messages[1].status == "success"
    assert resp.messages[2].content == "Stored that for you."
    assert resp.stop_reason.stop_reason == "end_turn"
    assert resp.usage.step_count == 2 and resp.usage.total_tokens > 0
    hits = client.agents.passages.search(agent_id=agent.id, query="what does Ada read")
    assert hits.count >= 1 and "Borges" in hits.results[0].content


def test_streaming_tokens_and_steps(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text="one two three four", ttft_s=0.2))
    chunks = list(
        client.agents.messages.stream(
            agent_id=agent.id, messages=[{"role": "user", "content": "count"}], stream_tokens=True
        )
    )
    text = "".join(c.content for c in chunks if c.message_type == "assistant_message")
    assert text == "one two three four"
    assert len([c for c in chunks if c.message_type == "assistant_message"]) == 4  # token deltas
    assert chunks[-2].message_type == "stop_reason" and chunks[-2].stop_reason == "end_turn"
    assert chunks[-1].message_type == "usage_statistics"
    fake_llm.push(Reply(text="whole message"))
    chunks = list(
        client.agents.messages.stream(
            agent_id=agent.id, messages=[{"role": "user", "content": "again"}]
        )
    )
    assert [c.content for c in chunks if c.message_type == "assistant_message"] == ["whole message"]


def test_scripted_model_turns(client: Letta) -> None:
    agent = client.agents.create(
        model="scripted/demo", memory_blocks=[{"label": "human", "value": "Name: Ada"}]
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Hi!"}]
    )
    assert "Ada" in resp.messages[-1].content and "offline demo model" in resp.messages[-1].content
    client.agents.passages.create(agent_id=agent.id, text="Ada's cat is called Pixel.")
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Do you remember my cat?"}]
    )
    assert resp.messages[0].tool_call.name == "search_memory"
    assert "Pixel" in resp.messages[-1].content


def test_message_pagination_ends(client: Letta) -> None:
    agent = client.agents.create(model="scripted/demo")
    for i in range(5):
        client.agents.messages.create(
            agent_id=agent.id, messages=[{"role": "user", "content": f"note {i}"}]
        )
    everything = list(client.agents.messages.list(agent_id=agent.id, limit=3, order="asc"))
    user_texts = [m.content for m in everything if m.message_type == "user_message"]
    assert user_texts == [f"note {i}" for i in range(5)]
    # Letta's agent history: `desc` takes the newest page, read oldest first; `after` is newer
    newest = client.agents.messages.list(agent_id=agent.id, limit=2).items
    assert [m.message_type for m in newest] == ["user_message", "assistant_message"]
    assert newest[0].content == "note 4"
    older = client.agents.messages.list(agent_id=agent.id, before=newest[0].id, limit=2).items
    assert [m.content for m in older if m.message_type == "user_message"] == ["note 3"]
    assert not client.agents.messages.list(agent_id=agent.id, after=newest[-1].id).items
    page = client.agents.messages.list(agent_id=agent.id, limit=4, order="asc")
    last = page.items[-1].id
    after = client.agents.messages.list(agent_id=agent.id, after=last, order="asc", limit=100)
    assert after.items and all(m.id != last for m in after.items)
    before = client.agents.messages.list(
        agent_id=agent.id, before=after.items[0].id, order="asc", limit=100
    )
    assert before.items[-1].id == last


def test_blocks_archival_and_tools(client: Letta) -> None:
    agent = client.agents.create(
        model="scripted/demo",
        memory_blocks=[{"label": "human", "value": "Name: Ada", "limit": 100}],
    )
    assert [b.label for b in client.agents.blocks.list(agent_id=agent.id)] == ["human"]
    updated = client.agents.blocks.update("human", agent_id=agent.id, value="Name: Ada\nCity: Lima")
    assert updated.value.endswith("Lima")
    assert (
        client.agents.blocks.retrieve("human", agent_id=agent.id).value == "Name: Ada\nCity: Lima"
    )
    made = client.agents.passages.create(
        agent_id=agent.id, text="Ada visited Cusco in May.", tags=["travel"]
    )
    client.agents.passages.create(agent_id=agent.id, text="Ada dislikes cilantro.", tags=["food"])
    assert len(list(client.agents.passages.list(agent_id=agent.id))) == 2
    found = client.agents.passages.search(agent_id=agent.id, query="trip to Peru", tags=["travel"])
    assert found.count == 1 and found.results[0].id == made[0].id
    client.agents.passages.delete(made[0].id, agent_id=agent.id)
    assert [p.text for p in client.agents.passages.list(agent_id=agent.id)] == [
        "Ada dislikes cilantro."
    ]
    tools = {t.name: t for t in client.tools.list()}
    assert tools["search_memory"].metadata["voice_safe"] is True
    assert tools["core_memory_append"].metadata["voice_safe"] is False


def test_openapi_lists_the_api(gateway_factory, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    import httpx

    srv: ServerThread = gateway_factory(database_url=sqlite_url)
    doc = httpx.get(f"{srv.url}/openapi.json").json()
    for path, method in [
        ("/v1/agents", "post"),
        ("/v1/agents/{agent_id}", "patch"),
        ("/v1/agents/{agent_id}/messages", "post"),
        ("/v1/agents/{agent_id}/messages/stream", "post"),
        ("/v1/agents/{agent_id}/core-memory/blocks/{label}", "patch"),
        ("/v1/agents/{agent_id}/archival-memory/search", "get"),
        ("/v1/tools", "get"),
        ("/v1/chat/completions", "post"),
    ]:
        assert method in doc["paths"][path], (path, method)


SHOUT = '''def shout(text: str) -> str:
    """Say it loudly.

    Args:
        text: What to say.
    """
    return text.upper()
'''


def strict(items: Any) -> list[Any]:
    """The items of a list response, each validated by its SDK model: letta-client builds pages
    without validation, even in strict mode."""
    out = list(items)
    for item in out:
        type(item).model_validate(item.to_dict(mode="json"))
    return out


def test_every_route_validates_in_strict_mode(client: Letta, fake_llm: FakeLLM) -> None:
    """letta-client 1.12.1 with `_strict_response_validation=True` over every route we serve:
    any response the SDK's models refuse raises APIResponseValidationError (an
    `embedding_endpoint_type: "local"` would make every agent response fail)."""
    assert client.health().status == "ok"
    for model in ("scripted/demo", "openai/fake"):
        agent = client.agents.create(
            model=model,
            memory_blocks=[{"label": "human", "value": "Ada"}],
            embedding="local/all-minilm-l6-v2",
        )
        assert agent.embedding_config is not None
        assert agent.embedding_config.embedding_endpoint_type == "hugging-face"
        assert agent.embedding == agent.embedding_config.handle == "local/all-minilm-l6-v2"
        assert agent.llm_config.handle == model
    a = agent.id
    assert a in [x.id for x in strict(client.agents.list())]
    client.agents.retrieve(agent_id=a)
    client.agents.update(agent_id=a, name="renamed", tags=["t"])
    strict(client.agents.blocks.list(agent_id=a))
    client.agents.blocks.retrieve("human", agent_id=a)
    client.agents.blocks.update("human", agent_id=a, value="Ada Lovelace")
    client.agents.passages.create(agent_id=a, text="Ada's cat is Pixel.", tags=["cat"])
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("archival_memory_search", {"query": "cat"})]),
        Reply(text="Pixel."),
    )
    resp = client.agents.messages.create(agent_id=a, messages=[{"role": "user", "content": "Cat?"}])
    assert {m.message_type for m in resp.messages} >= {"tool_call_message", "tool_return_message"}
    fake_llm.push(Reply(text="one two"))
    chunks = list(
        client.agents.messages.stream(
            agent_id=a, messages=[{"role": "user", "content": "count"}], stream_tokens=True
        )
    )
    assert chunks[-1].message_type == "usage_statistics"
    fake_llm.push(Reply(text="whole"))
    chunks = list(
        client.agents.messages.stream(agent_id=a, messages=[{"role": "user", "content": "again"}])
    )
    assert chunks[-2].message_type == "stop_reason"
    kinds = {m.message_type for m in strict(client.agents.messages.list(agent_id=a, limit=100))}
    assert {
        "user_message",
        "assistant_message",
        "tool_call_message",
        "tool_return_message",
    } <= kinds
    passages = strict(client.agents.passages.list(agent_id=a))
    assert client.agents.passages.search(agent_id=a, query="cat").count == 1
    client.agents.passages.delete(passages[0].id, agent_id=a)
    assert strict(client.tools.list())
    tool = client.tools.create(source_code=SHOUT)
    client.tools.upsert(source_code=SHOUT)
    client.tools.retrieve(tool.id)
    client.tools.update(tool.id, description="Loud.")
    client.agents.tools.attach(tool.id, agent_id=a)
    assert tool.id in [t.id for t in strict(client.agents.tools.list(agent_id=a))]
    client.agents.tools.detach(tool.id, agent_id=a)
    client.tools.delete(tool.id)
    client.agents.delete(agent_id=a)
