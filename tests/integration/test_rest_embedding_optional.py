"""Agents without an embedding model, as Letta 0.16 creates them: none given and no default
chosen by the operator, the agent reports `embedding` and `embedding_config` null (strict
letta-client 1.12.1), and its archival memory still works (insert, list, search, delete:
embedded with the built-in local model). With VG_DEFAULT_EMBEDDING chosen, agents get it."""

from __future__ import annotations

import httpx
from letta_client import Letta

from memory.embeddings import LOCAL_HANDLE


def test_agent_without_embedding_keeps_an_archive(gateway_factory, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    srv = gateway_factory(database_url=sqlite_url)
    c = Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)
    plain = c.agents.create(model="openai/fake", memory_blocks=[{"label": "human", "value": "x"}])
    assert plain.embedding is None and plain.embedding_config is None
    assert c.agents.retrieve(plain.id).embedding_config is None
    assert [a.embedding_config for a in c.agents.list() if a.id == plain.id] == [None]
    chosen = c.agents.create(model="openai/fake", embedding=LOCAL_HANDLE)
    assert chosen.embedding_config is not None and chosen.embedding_config.handle == LOCAL_HANDLE

    for text in (
        "Apples and pears are fruit.",
        "The train leaves at nine.",
        "Kiwis are fruit too.",
    ):
        made = c.agents.passages.create(plain.id, text=text, tags=["notes"])
        assert made[0].text == text and made[0].embedding is None
    listed = c.agents.passages.list(plain.id)
    assert len(listed) == 3 and all(p.tags == ["notes"] for p in listed)
    assert [p.text for p in c.agents.passages.list(plain.id, search="train")] == [
        "The train leaves at nine."
    ]
    found = c.agents.passages.search(plain.id, query="which fruit is there?", top_k=2)
    assert {r.content for r in found.results} <= {
        "Apples and pears are fruit.",
        "Kiwis are fruit too.",
    } and found.results
    c.agents.passages.delete(listed[0].id, agent_id=plain.id)
    assert listed[0].id not in {p.id for p in c.agents.passages.list(plain.id)}
    # an unknown agent: 404 as before
    r = httpx.get(f"{srv.url}/v1/agents/agent-nope/archival-memory")
    assert r.status_code == 404 and "detail" in r.json()


def test_operator_default_embedding_fills_in(gateway_factory, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    srv = gateway_factory(
        database_url=sqlite_url, default_embedding="openai/text-embedding-3-small"
    )
    c = Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)
    agent = c.agents.create(model="openai/fake")
    assert agent.embedding == "openai/text-embedding-3-small"
    assert agent.embedding_config is not None
    assert agent.embedding_config.handle == "openai/text-embedding-3-small"
    r = httpx.post(f"{srv.url}/v1/agents", json={"model": "openai/fake", "embedding": 5})
    assert r.status_code == 422 and "detail" in r.json()
