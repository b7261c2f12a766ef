"""Conversations listed by their last message (Letta's `order_by`), through letta-client in
strict mode and raw HTTP on a live gateway, and a bad `order_by`."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from letta_client import Letta

from tests.support.fake_llm import FakeLLM
from tests.support.servers import ServerThread


def test_order_by_last_message(
    gateway_factory: Callable[..., ServerThread], db_url: str, fake_llm_url: str, fake_llm: FakeLLM
) -> None:
    gw: ServerThread = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    plain = Letta(base_url=gw.url, api_key="k", timeout=60)
    strict = Letta(base_url=gw.url, api_key="k", timeout=60, _strict_response_validation=True)
    http = httpx.Client(base_url=gw.url, headers={"Authorization": "Bearer k"})
    agent = plain.agents.create(model="openai/fake")
    older = strict.conversations.create(agent_id=agent.id)
    newer = strict.conversations.create(agent_id=agent.id)
    list(strict.conversations.messages.create(older.id, input="hello"))

    by_created = [c.id for c in strict.conversations.list(agent_id=agent.id, order="desc")]
    assert by_created.index(newer.id) < by_created.index(older.id)
    by_run = strict.conversations.list(
        agent_id=agent.id, order_by="last_run_completion", order="desc"
    )
    ids = [c.id for c in by_run]
    assert ids.index(older.id) < ids.index(newer.id)  # it had the last message
    spoke = next(c for c in by_run if c.id == older.id)
    assert spoke.last_message_at is not None and spoke.created_at is not None
    assert spoke.last_message_at > spoke.created_at

    q = {"agent_id": agent.id, "order_by": "last_message_at", "order": "asc"}
    asc = [c["id"] for c in http.get("/v1/conversations", params=q).json()]
    assert asc.index(newer.id) < asc.index(older.id)
    page = http.get("/v1/conversations", params={**q, "after": newer.id}).json()
    assert [c["id"] for c in page] == [older.id]  # the cursor follows the same order

    bad = http.get("/v1/conversations", params={"agent_id": agent.id, "order_by": "name"})
    assert bad.status_code == 422 and "order_by" in bad.json()["detail"]
    http.close()
