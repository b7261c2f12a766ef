"""Letta's `<memory_metadata>` section (strict letta-client 1.12.1 and raw HTTP): a text
conversation's system message and the prompt its turns send the model name the agent and the
conversation (`default` for the agent's default one) and when the prompt last changed."""

from __future__ import annotations

import httpx
from letta_client import Letta

from tests.support.fake_llm import FakeLLM
from tests.support.servers import ServerThread


def _system(http: httpx.Client, message_id: str) -> str:
    r = http.get(f"/v1/messages/{message_id}")
    assert r.status_code == 200, r.text
    [msg] = r.json()
    assert msg["message_type"] == "system_message"
    return str(msg["content"])


def test_memory_metadata(
    gateway_factory, sqlite_url: str, fake_llm_url: str, fake_llm: FakeLLM
) -> None:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=sqlite_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    c = Letta(base_url=srv.url, timeout=60, _strict_response_validation=True)
    http = httpx.Client(base_url=srv.url, timeout=60)
    agent = c.agents.create(model="openai/fake")
    assert agent.message_ids
    text = _system(http, agent.message_ids[0])
    assert "<memory_metadata>" in text and f"- AGENT_ID: {agent.id}" in text
    assert "- CONVERSATION_ID: default" in text and "- System prompt last recompiled:" in text

    conv = c.conversations.create(agent_id=agent.id)
    got = c.conversations.retrieve(conv.id)
    assert got.in_context_message_ids
    assert f"- CONVERSATION_ID: {conv.id}" in _system(http, got.in_context_message_ids[0])

    for _ in c.conversations.messages.create(  # a stream
        conv.id, messages=[{"role": "user", "content": "hi"}]
    ):
        pass
    sent = fake_llm.requests[-1]["messages"][0]
    assert sent["role"] == "system" and f"- CONVERSATION_ID: {conv.id}" in sent["content"]
    assert f"- AGENT_ID: {agent.id}" in sent["content"]
