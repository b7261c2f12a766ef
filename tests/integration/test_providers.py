"""Letta's model providers, by letta-client 1.12.1 in strict mode: `anthropic/` through the real
`anthropic` SDK against a loopback server speaking the Messages API (streaming, tool use);
OpenAI-compatible providers (groq, ollama) through the openai SDK against the loopback
chat-completions server; `GET /v1/models/` and `/v1/models/embedding`; an unconfigured
provider's handle refused with 422 naming the configured ones."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from letta_client import Letta, UnprocessableEntityError

from tests.integration.test_rest_letta_client import strict
from tests.support.fake_anthropic import API_KEY, FakeAnthropic
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread

CLAUDE = "anthropic/claude-sonnet-4-6"


@pytest.fixture(scope="module")
def anthropic_server() -> Iterator[tuple[FakeAnthropic, ServerThread]]:
    fake = FakeAnthropic()
    srv = ServerThread(fake.app).start()
    try:
        yield fake, srv
    finally:
        srv.stop()


@pytest.fixture
def claude(anthropic_server: tuple[FakeAnthropic, ServerThread]) -> FakeAnthropic:
    fake = anthropic_server[0]
    fake.queue.clear()
    fake.requests.clear()
    return fake


@pytest.fixture
def client(  # type: ignore[no-untyped-def]
    gateway_factory,
    db_url: str,
    fake_llm_url: str,
    anthropic_server: tuple[FakeAnthropic, ServerThread],
    claude: FakeAnthropic,
) -> Iterator[Letta]:
    srv = gateway_factory(
        database_url=db_url,
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        anthropic_api_key=API_KEY,
        anthropic_base_url=anthropic_server[1].url,
        groq_api_key="gsk-test",
        groq_base_url=fake_llm_url,
        ollama_base_url=fake_llm_url.removesuffix("/v1"),  # as Letta takes it: no /v1
    )
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def test_models_list_the_configured_providers(client: Letta) -> None:
    models = strict(client.models.list())
    handles = {m.handle for m in models}
    assert {
        "anthropic/claude-sonnet-4-6",
        "anthropic/claude-haiku-4-5",
        "groq/fake",
        "ollama/fake",
        "openai/fake",
        "scripted/demo",
    } <= handles
    assert not {h for h in handles if h and h.split("/")[0] in ("mistral", "together", "azure")}
    sonnet = next(m for m in models if m.handle == CLAUDE)
    assert sonnet.provider_type == "anthropic" and sonnet.name == "claude-sonnet-4-6"
    assert sonnet.max_context_window == 200_000
    only = strict(client.models.list(provider_name="groq"))
    assert [m.handle for m in only] == ["groq/fake"]
    assert {m.handle for m in strict(client.models.list(provider_type="ollama"))} == {"ollama/fake"}
    embeddings = strict(client.models.embeddings.list())
    assert "local/all-minilm-l6-v2" in {e.handle for e in embeddings}
    assert {e.embedding_dim for e in embeddings if e.handle == "local/all-minilm-l6-v2"} == {384}


def test_anthropic_agent_uses_a_tool_and_answers(client: Letta, claude: FakeAnthropic) -> None:
    agent = client.agents.create(model=CLAUDE, memory_blocks=[{"label": "human", "value": ""}])
    assert agent.llm_config.api_model_endpoint_type == "anthropic"
    assert agent.llm_config.handle == CLAUDE
    claude.push(
        Reply(
            text="Let me note that.",
            tool_calls=[
                ToolCallSpec("archival_memory_insert", {"content": "Ada reads Borges."}, 4)
            ],
        ),
        Reply(text="Noted: you read Borges."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Remember I read Borges"}]
    )
    kinds = [m.message_type for m in resp.messages]
    assert kinds == [
        "assistant_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    call = resp.messages[1].tool_call
    assert call.name == "archival_memory_insert"
    assert json.loads(call.arguments) == {"content": "Ada reads Borges."}
    assert resp.messages[2].status == "success"
    assert resp.messages[3].content == "Noted: you read Borges."
    assert resp.usage.step_count == 2 and resp.usage.prompt_tokens > 0
    first, second = claude.requests
    assert first["model"] == "claude-sonnet-4-6" and first["stream"] is True
    assert "human" in first["system"]  # the compiled memory blocks, as the system prompt
    assert "archival_memory_insert" in {t["name"] for t in first["tools"]}
    tool_use = second["messages"][-2]["content"][-1]
    result = second["messages"][-1]["content"][0]
    assert tool_use["type"] == "tool_use" and tool_use["input"] == {"content": "Ada reads Borges."}
    assert result["type"] == "tool_result" and result["tool_use_id"] == tool_use["id"]
    hits = client.agents.passages.search(agent_id=agent.id, query="what does Ada read")
    assert "Borges" in hits.results[0].content


def test_anthropic_token_streaming(client: Letta, claude: FakeAnthropic) -> None:
    agent = client.agents.create(model=CLAUDE)
    claude.push(Reply(text="one two three four"))
    chunks = list(
        client.agents.messages.stream(
            agent_id=agent.id, messages=[{"role": "user", "content": "count"}], stream_tokens=True
        )
    )
    deltas = [c.content for c in chunks if c.message_type == "assistant_message"]
    assert deltas == ["one ", "two ", "three ", "four"]
    assert chunks[-2].message_type == "stop_reason" and chunks[-2].stop_reason == "end_turn"
    # the next turn carries the history in Anthropic's shape (alternating, user first)
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "and now?"}]
    )
    assert resp.messages[-1].content == "You said: and now?. That is all I know."
    roles = [m["role"] for m in claude.requests[-1]["messages"]]
    assert roles == ["user", "assistant", "user"]


def test_anthropic_failure_is_an_llm_error(client: Letta, claude: FakeAnthropic) -> None:
    agent = client.agents.create(model=CLAUDE)
    claude.push(Reply(fail_status=400))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "hello"}]
    )
    assert resp.stop_reason.stop_reason == "llm_api_error"


@pytest.mark.parametrize(("handle", "kind"), [("groq/fake", "groq"), ("ollama/fake", "ollama")])
def test_openai_compatible_providers(
    client: Letta, fake_llm: FakeLLM, handle: str, kind: str
) -> None:
    agent = client.agents.create(model=handle)
    assert agent.llm_config.api_model_endpoint_type == kind
    fake_llm.push(Reply(text=f"Hello from {kind}."))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "hi"}]
    )
    assert resp.messages[-1].content == f"Hello from {kind}."
    assert fake_llm.requests[-1]["model"] == "fake"


def test_unconfigured_provider_is_422(client: Letta) -> None:
    with pytest.raises(UnprocessableEntityError) as err:
        client.agents.create(model="mistral/mistral-large-latest")
    detail = err.value.body["detail"]  # type: ignore[index]
    assert "'mistral' is not configured" in detail and "MISTRAL_API_KEY" in detail
    assert "anthropic, groq, ollama" in detail  # the configured ones, in Letta's order
    agent = client.agents.create(model=CLAUDE)
    with pytest.raises(UnprocessableEntityError):
        client.agents.update(agent_id=agent.id, model="together/llama")
    assert client.agents.retrieve(agent_id=agent.id).model == CLAUDE  # nothing changed
    with pytest.raises(UnprocessableEntityError) as err:
        client.agents.create(model="nosuch/model")
    assert "unknown model handle" in err.value.body["detail"]  # type: ignore[index]
    with pytest.raises(UnprocessableEntityError):
        client.models.list(provider_category=["premium"])  # type: ignore[list-item]
