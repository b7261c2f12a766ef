"""Agents that ask agents (Letta's multi-agent tools) through the official letta-client SDK:
the asked agent answers in a consult run of the one loop (its own prompt; the question is not
stored in its memory, so no caller's words reach another's context), only the owner's agents
can be asked, and tags pick several."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from letta_client import Letta

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Letta:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    return Letta(
        base_url=srv.url,
        api_key="any-key-on-loopback",
        timeout=60,
        _strict_response_validation=True,
    )


def test_ask_another_agent_and_wait(client: Letta, fake_llm: FakeLLM) -> None:
    specialist = client.agents.create(
        model="openai/fake", system="You are the billing specialist.", include_base_tools=False
    )
    asker = client.agents.create(
        model="openai/fake",
        include_base_tools=False,
        tools=["send_message_to_agent_and_wait_for_reply"],
    )
    args = {"message": "What does plan B cost?", "other_agent_id": specialist.id}
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("send_message_to_agent_and_wait_for_reply", args)]),
        Reply(text="Plan B costs 12 euros a month."),  # the specialist
        Reply(text="The specialist says 12 euros."),  # the asker, with the reply
    )
    start = len(fake_llm.requests)
    resp = client.agents.messages.create(
        agent_id=asker.id, messages=[{"role": "user", "content": "price of plan B?"}]
    )
    ret = [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert [(m.status, m.tool_return) for m in ret] == [  # type: ignore[union-attr]
        ("success", "Plan B costs 12 euros a month.")
    ]
    asked = fake_llm.requests[start + 1]["messages"]
    assert asked[0]["content"].startswith("You are the billing specialist.")
    assert asked[-1]["content"].endswith("What does plan B cost?")
    assert f"agent with ID '{asker.id}'" in asked[-1]["content"]
    assert "tools" not in fake_llm.requests[start + 1] or not any(
        t["function"]["name"].startswith("send_message_to_agent")
        for t in fake_llm.requests[start + 1].get("tools") or []
    )
    # nothing of the question is stored with the specialist (its system message only)
    assert [m.message_type for m in client.agents.messages.list(agent_id=specialist.id)] == [
        "system_message"
    ]


def test_unknown_or_foreign_agent_and_tags(client: Letta, fake_llm: FakeLLM) -> None:
    asker = client.agents.create(
        model="openai/fake",
        include_base_tools=False,
        tools=["send_message_to_agent_and_wait_for_reply", "send_message_to_agents_matching_tags"],
    )
    a = client.agents.create(model="openai/fake", include_base_tools=False, tags=["support", "en"])
    b = client.agents.create(model="openai/fake", include_base_tools=False, tags=["support", "fr"])
    client.agents.create(model="openai/fake", include_base_tools=False, tags=["sales"])
    bad = {"message": "hi", "other_agent_id": "agent-00000000-0000-0000-0000-000000000000"}
    tags = {"message": "status?", "match_all": ["support"], "match_some": []}
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("send_message_to_agent_and_wait_for_reply", bad)]),
        Reply(tool_calls=[ToolCallSpec("send_message_to_agents_matching_tags", tags)]),
        Reply(text="all fine"),
        Reply(text="all fine"),
        Reply(text="done"),
    )
    resp = client.agents.messages.create(
        agent_id=asker.id, messages=[{"role": "user", "content": "check"}]
    )
    ret = [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert ret[0].status == "error" and "not found" in str(ret[0].tool_return)  # type: ignore[union-attr]
    replies = json.loads(str(ret[1].tool_return))  # type: ignore[union-attr]
    assert sorted(r["agent_id"] for r in replies) == sorted([a.id, b.id])
    assert all(r["response"] == "all fine" for r in replies)


def test_async_reply_goes_back_to_the_senders_conversation_only(
    client: Letta, fake_llm: FakeLLM
) -> None:
    """Letta's async variant: the tool returns at once; the asked agent's reply is delivered
    as a message into the sender's conversation that asked (not another caller's), and the
    sender reads it on its next turn."""
    specialist = client.agents.create(
        model="openai/fake", system="You are the billing specialist.", include_base_tools=False
    )
    asker = client.agents.create(
        model="openai/fake", include_base_tools=False, tools=["send_message_to_agent_async"]
    )
    mine = client.conversations.create(agent_id=asker.id, extra_body={"caller": "u1"})
    other = client.conversations.create(agent_id=asker.id, extra_body={"caller": "u2"})

    def respond(body: dict[str, Any]) -> Reply:
        if str(body["messages"][0]["content"]).startswith("You are the billing specialist."):
            return Reply(text="Plan B costs 12 euros a month.", ttft_s=0.3)
        return Reply(text="ok")

    fake_llm.responder = respond
    args = {"message": "What does plan B cost?", "other_agent_id": specialist.id}
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("send_message_to_agent_async", args)]))
    out = list(client.conversations.messages.create(mine.id, input="price of plan B?"))
    ret = [m for m in out if m.message_type == "tool_return_message"]
    assert [str(m.tool_return) for m in ret] == ["Sent message successfully."]  # type: ignore[union-attr]

    deadline = time.monotonic() + 30
    while True:
        listed = list(client.conversations.messages.list(mine.id, order="asc"))
        got = [m for m in listed if "Plan B costs 12 euros" in str(getattr(m, "content", ""))]
        if got or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [m.message_type for m in got] == ["system_message"]
    assert f"agent with ID '{specialist.id}'" in str(got[0].content)  # type: ignore[union-attr]
    # the sender reads it on its next turn in that conversation ...
    fake_llm.requests.clear()
    list(client.conversations.messages.create(mine.id, input="so?"))
    assert "Plan B costs 12 euros" in json.dumps(fake_llm.requests[0]["messages"])
    # ... and no other caller's conversation of the agent ever sees it
    fake_llm.requests.clear()
    list(client.conversations.messages.create(other.id, input="hello"))
    assert "Plan B" not in json.dumps(fake_llm.requests[0]["messages"])
    assert "Plan B" not in str(list(client.conversations.messages.list(other.id)))
    assert [m.message_type for m in client.agents.messages.list(agent_id=specialist.id)] == [
        "system_message"
    ]
