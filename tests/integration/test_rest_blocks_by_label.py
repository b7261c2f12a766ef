"""Blocks by label as Letta clients use them (strict letta-client 1.12.1 and raw HTTP): an
agent created with `block_ids` sees those blocks by label (a default block gives way), a
shared block's edits show on every agent it is on, and `label` in a block update renames it.
Bad input: unknown or another user's block ids 404, two blocks of one label 409, wrong types
422; nothing is created by a refused request."""

from __future__ import annotations

import httpx
import pytest
from letta_client import ConflictError, Letta, NotFoundError

from tests.integration.test_rest_conversations import make_user


@pytest.fixture
def two(gateway_factory, sqlite_url: str):  # type: ignore[no-untyped-def]
    keys = make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")
    srv = gateway_factory(database_url=sqlite_url, api_key="server-secret")
    return [
        (
            Letta(base_url=srv.url, api_key=k, timeout=60, _strict_response_validation=True),
            httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {k}"}, timeout=60),
        )
        for k in keys
    ]


def test_block_ids_and_rename(two) -> None:  # type: ignore[no-untyped-def]
    (c, http), (_, bob_http) = two
    human = c.blocks.create(label="human", value="username: sarah")
    a1 = c.agents.create(model="openai/fake", block_ids=[human.id])  # defaults: persona only
    a2 = c.agents.create(
        model="openai/fake",
        memory_blocks=[{"label": "persona", "value": "you are agent 2"}],
        block_ids=[human.id],
    )
    assert sorted(b.label for b in a1.memory.blocks) == ["human", "persona"]
    for agent in (a1, a2):
        got = c.agents.blocks.retrieve("human", agent_id=agent.id)
        assert (got.id, got.value) == (human.id, "username: sarah")
    c.agents.blocks.update("human", agent_id=a1.id, value="username: charles")
    assert c.agents.blocks.retrieve("human", agent_id=a2.id).value == "username: charles"
    assert {a.id for a in c.blocks.agents.list(human.id)} == {a1.id, a2.id}

    renamed = c.agents.blocks.update("persona", agent_id=a2.id, label="role")
    assert renamed.label == "role" and renamed.value == "you are agent 2"
    labels = [b.label for b in c.agents.blocks.list(agent_id=a2.id)]
    assert "role" in labels and "persona" not in labels
    with pytest.raises(NotFoundError):
        c.agents.blocks.retrieve("persona", agent_id=a2.id)
    with pytest.raises(ConflictError):  # the agent has a `human` already
        c.agents.blocks.update("role", agent_id=a2.id, label="human")
    r = http.patch(f"/v1/agents/{a2.id}/core-memory/blocks/role", json={"label": ""})
    assert r.status_code == 422 and "detail" in r.json()
    r = bob_http.patch(f"/v1/agents/{a2.id}/core-memory/blocks/role", json={"label": "x"})
    assert r.status_code == 404 and "detail" in r.json()


def test_block_ids_bad_input(two) -> None:  # type: ignore[no-untyped-def]
    (c, http), (_, bob_http) = two
    human = c.blocks.create(label="human", value="alice's")
    before = len(list(c.agents.list()))
    for body, status in (
        ({"model": "openai/fake", "block_ids": ["block-nope"]}, 404),
        ({"model": "openai/fake", "block_ids": "block-x"}, 422),
        ({"model": "openai/fake", "block_ids": [5]}, 422),
        (
            {
                "model": "openai/fake",
                "memory_blocks": [{"label": "human", "value": "mine"}],
                "block_ids": [human.id],
            },
            409,
        ),
    ):
        r = http.post("/v1/agents", json=body)
        assert r.status_code == status and "detail" in r.json(), (body, r.text)
    r = bob_http.post("/v1/agents", json={"model": "openai/fake", "block_ids": [human.id]})
    assert r.status_code == 404 and "detail" in r.json()  # alice's block, bob's key
    assert len(list(c.agents.list())) == before  # nothing created
