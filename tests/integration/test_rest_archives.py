"""Archives with letta-client 1.12.1 in strict mode: CRUD, passages, attaching one archive to
several agents, `passages.search` across every archive an agent sees, caller privacy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from letta_client import Letta, NotFoundError, UnprocessableEntityError

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test")
    yield Letta(base_url=srv.url, api_key="k", timeout=120, _strict_response_validation=True)


def test_archive_crud_and_passages(client: Letta) -> None:
    kb = client.archives.create(name="company kb", description="the handbook")
    assert kb.id.startswith("archive-") and kb.embedding_config is not None
    assert client.archives.retrieve(kb.id).name == "company kb"
    client.archives.update(kb.id, name="handbook")
    assert client.archives.retrieve(kb.id).name == "handbook"
    assert kb.id in [a.id for a in client.archives.list()]
    assert [a.id for a in client.archives.list(name="handbook")] == [kb.id]
    one = client.archives.passages.create(kb.id, text="Returns are accepted within 30 days.")
    assert one.archive_id == kb.id and one.text.startswith("Returns")
    many = client.archives.passages.create_many(
        kb.id,
        passages=[
            {"text": "The office opens at 9am on weekdays.", "tags": ["hours"]},
            {"text": "Parking is free for visitors in lot B.", "tags": ["parking"]},
        ],
    )
    assert [p.archive_id for p in many] == [kb.id, kb.id]
    hits = client.passages.search(archive_id=kb.id, query="when can I return an item?")
    assert hits[0].passage.id == one.id and hits[0].score > 0
    tagged = client.passages.search(archive_id=kb.id, query="open", tags=["parking"])
    assert [h.passage.id for h in tagged] == [many[1].id]
    client.archives.passages.delete(one.id, archive_id=kb.id)
    hits = client.passages.search(archive_id=kb.id, query="when can I return an item?")
    assert one.id not in [h.passage.id for h in hits] and len(hits) == 2
    client.archives.delete(kb.id)
    with pytest.raises(NotFoundError):
        client.archives.retrieve(kb.id)


def test_one_archive_behind_several_agents(client: Letta, fake_llm: FakeLLM) -> None:
    kb = client.archives.create(name="menu kb")
    client.archives.passages.create(kb.id, text="Our pizza oven is wood-fired at 450 degrees.")
    sales = client.agents.create(model="openai/fake", name="sales")
    support = client.agents.create(model="openai/fake", name="support")
    loner = client.agents.create(model="openai/fake", name="loner")
    client.agents.passages.create(agent_id=sales.id, text="Sales target: 40 pizzas a day.")
    for agent in (sales, support):
        client.agents.archives.attach(kb.id, agent_id=agent.id)
    # the agent's own archive (its existing archival memory) and the shared one
    listed = {a.id for a in client.archives.list(agent_id=sales.id)}
    assert kb.id in listed and len(listed) == 2
    for agent in (sales, support):
        hits = client.passages.search(agent_id=agent.id, query="how hot is the oven?")
        assert hits[0].passage.text.startswith("Our pizza oven")
    assert not client.passages.search(agent_id=loner.id, query="how hot is the oven?")
    both = client.passages.search(agent_id=sales.id, query="pizza", limit=5)
    own = "archive-" + sales.id.removeprefix("agent-")
    assert {h.passage.archive_id for h in both} == {kb.id, own} and len(both) == 2
    # the agent's own archival search tool finds the shared archive too
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("archival_memory_search", {"query": "oven temperature"})]),
        Reply(text="done"),
    )
    client.agents.messages.create(
        agent_id=support.id, messages=[{"role": "user", "content": "How hot is the oven?"}]
    )
    tool_msgs = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "450 degrees" in tool_msgs[-1]["content"]
    client.agents.archives.detach(kb.id, agent_id=support.id)
    assert not client.passages.search(agent_id=support.id, query="how hot is the oven?")
    assert client.passages.search(agent_id=sales.id, query="how hot is the oven?")


def test_bad_input(client: Letta) -> None:
    agent = client.agents.create(model="openai/fake")
    with pytest.raises(NotFoundError):
        client.archives.retrieve("archive-00000000-0000-0000-0000-000000000000")
    with pytest.raises(NotFoundError):
        client.archives.passages.create("archive-nope", text="x")
    with pytest.raises(NotFoundError):
        client.agents.archives.attach("archive-nope", agent_id=agent.id)
    kb = client.archives.create(name="kb")
    with pytest.raises(NotFoundError):
        client.archives.passages.delete("passage-nope", archive_id=kb.id)
    with pytest.raises(UnprocessableEntityError):
        client.passages.search(archive_id=kb.id, query="  ")
    with pytest.raises(UnprocessableEntityError):
        client.archives.create(name="x", embedding="nobody/nothing")
    # a batch with one bad passage stores none of them
    with pytest.raises(UnprocessableEntityError):
        client.archives.passages.create_many(kb.id, passages=[{"text": "fine"}, {"text": ""}])
    assert not client.passages.search(archive_id=kb.id, query="fine")
