"""Approvals and client-side tools over REST, in Letta's shapes, through the official
letta-client SDK: a call of a tool that requires approval stops the run with an
`approval_request_message` (stop reason `requires_approval`) and nothing runs; an approval
message approves (the tool runs once) or denies with a reason (it never runs); a client tool's
call pauses the run until the client returns its result. Bad input: an approval when nothing
waits, a message while something waits, an unknown call id (400, in Letta's words)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from letta_client import BadRequestError, ConflictError, Letta

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread

ACTION = "archival_memory_insert"  # its effect (a stored passage) shows whether it ran


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    yield Letta(
        base_url=srv.url,
        api_key="any-key-on-loopback",
        timeout=60,
        _strict_response_validation=True,
    )


def stored(client: Letta, agent_id: str) -> list[str]:
    return [p.text for p in client.agents.passages.list(agent_id=agent_id)]


def new_agent(client: Letta) -> str:
    agent = client.agents.create(model="openai/fake", include_base_tools=False, tools=[ACTION])
    updated = client.agents.tools.update_approval(
        ACTION, agent_id=agent.id, body_requires_approval=True
    )
    assert updated is not None
    assert [(r.type, r.tool_name) for r in updated.tool_rules or []] == [
        ("requires_approval", ACTION)
    ]
    return agent.id


def ask_transfer(client: Letta, fake_llm: FakeLLM, agent_id: str) -> Any:
    fake_llm.push(Reply(tool_calls=[ToolCallSpec(ACTION, {"content": "pay Bob 200"})]))
    return client.agents.messages.create(
        agent_id=agent_id, messages=[{"role": "user", "content": "send Bob 200"}]
    )


def test_approve_runs_the_tool_once(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = new_agent(client)
    resp = ask_transfer(client, fake_llm, agent_id)
    assert resp.stop_reason.stop_reason == "requires_approval"
    req = [m for m in resp.messages if m.message_type == "approval_request_message"]
    assert len(req) == 1 and req[0].tool_call.name == ACTION  # type: ignore[union-attr]
    assert not [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert stored(client, agent_id) == []  # nothing ran
    call_id = req[0].tool_call.tool_call_id  # type: ignore[union-attr]
    fake_llm.push(Reply(text="Done, 200 euros sent."))
    resp2 = client.agents.messages.create(
        agent_id=agent_id,
        messages=[
            {
                "type": "approval",
                "approvals": [{"type": "approval", "tool_call_id": call_id, "approve": True}],
            }
        ],
    )
    assert resp2.stop_reason.stop_reason == "end_turn"
    returned = [m for m in resp2.messages if m.message_type == "tool_return_message"]
    assert [m.status for m in returned] == ["success"]  # type: ignore[union-attr]
    assert stored(client, agent_id) == ["pay Bob 200"]
    listed = client.agents.messages.list(agent_id=agent_id, order="asc")
    kinds = [m.message_type for m in listed]
    assert "approval_request_message" in kinds and "approval_response_message" in kinds
    answer = next(m for m in listed if m.message_type == "approval_response_message")
    assert answer.approve is True  # type: ignore[union-attr]
    # the model saw the tool result after the call, and no approval message
    roles = [m["role"] for m in fake_llm.requests[-1]["messages"]]
    assert roles[-2:] == ["assistant", "tool"]
    # answering again: nothing waits any more
    with pytest.raises(BadRequestError, match="No tool call is currently awaiting approval"):
        client.agents.messages.create(
            agent_id=agent_id,
            messages=[{"type": "approval", "approve": True}],  # type: ignore[list-item]
        )
    assert stored(client, agent_id) == ["pay Bob 200"]  # once


def test_deny_with_reason_never_runs(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = new_agent(client)
    ask_transfer(client, fake_llm, agent_id)
    with pytest.raises(ConflictError, match="Cannot send a new message"):
        client.agents.messages.create(
            agent_id=agent_id, messages=[{"role": "user", "content": "hello?"}]
        )
    with pytest.raises(
        BadRequestError, match=r"Invalid tool call IDs: Expected \[.call_.*got \[.call-x.\]"
    ):
        client.agents.messages.create(
            agent_id=agent_id,
            messages=[
                {
                    "type": "approval",
                    "approvals": [{"type": "approval", "tool_call_id": "call-x", "approve": True}],
                }
            ],
        )
    fake_llm.push(Reply(text="OK, I will not."))
    resp = client.agents.messages.create(
        agent_id=agent_id,
        messages=[{"type": "approval", "approve": False, "reason": "wrong account"}],  # type: ignore[list-item]
    )
    ret = [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert [(m.status, m.tool_return) for m in ret] == [  # type: ignore[union-attr]
        ("error", "Error: request to call tool denied. User reason: wrong account")
    ]
    assert stored(client, agent_id) == []


def test_client_tool_over_rest(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake", include_base_tools=False)
    tool = {
        "name": "show_map",
        "description": "Show a map on the client's screen.",
        "parameters": {"type": "object", "properties": {"place": {"type": "string"}}},
    }
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("show_map", {"place": "Paris"})]))
    resp = client.agents.messages.create(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "where is Paris?"}],
        client_tools=[tool],
    )
    assert resp.stop_reason.stop_reason == "requires_approval"
    offered = {t["function"]["name"] for t in fake_llm.requests[-1]["tools"]}
    assert offered == {"show_map"}
    req = next(m for m in resp.messages if m.message_type == "approval_request_message")
    call_id = req.tool_call.tool_call_id  # type: ignore[union-attr]
    fake_llm.push(Reply(text="It is on your screen."))
    resp2 = client.agents.messages.create(
        agent_id=agent.id,
        messages=[
            {
                "type": "approval",
                "approvals": [
                    {
                        "type": "tool",
                        "tool_call_id": call_id,
                        "tool_return": "map of Paris shown",
                        "status": "success",
                    }
                ],
            }
        ],
        client_tools=[tool],
    )
    ret = [m for m in resp2.messages if m.message_type == "tool_return_message"]
    assert [(m.status, m.tool_return) for m in ret] == [("success", "map of Paris shown")]  # type: ignore[union-attr]
    last = fake_llm.requests[-1]["messages"][-1]
    assert last == {"role": "tool", "tool_call_id": call_id, "content": "map of Paris shown"}


def test_client_tool_overrides_the_agents_tool(client: Letta, fake_llm: FakeLLM) -> None:
    """A client tool named as one of the agent's tools replaces it for that run (Letta's): the
    call waits for the client, the server's tool never runs."""
    client.tools.create(source_code=NOTE)
    agent = client.agents.create(model="openai/fake", include_base_tools=False, tools=["note"])
    tool = {"name": "note", "description": "Note it on the client.", "parameters": {}}
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("note", {"text": "x"})]))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "note x"}], client_tools=[tool]
    )
    assert resp.stop_reason.stop_reason == "requires_approval"
    assert [t["function"]["name"] for t in fake_llm.requests[-1]["tools"]] == ["note"]
    assert fake_llm.requests[-1]["tools"][0]["function"]["description"] == "Note it on the client."
    req = resp.messages[-1]
    assert req.message_type == "approval_request_message" and req.tool_call.name == "note"
    assert not [m for m in resp.messages if m.message_type == "tool_return_message"]


NOTE = '''
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    return "noted " + text
'''


def test_mixed_step_as_letta(client: Letta, fake_llm: FakeLLM) -> None:
    """A step calling a tool that needs approval and one that does not (Letta's parallel
    approval test): nothing runs before the answer; the free call is shown as a
    tool_call_message next to the approval request of the other; on the answer (a denial
    here) it runs, and the model gets both results before it goes on."""
    client.tools.create(source_code=NOTE)
    agent = client.agents.create(
        model="openai/fake", include_base_tools=False, tools=[ACTION, "note"]
    )
    client.agents.tools.update_approval(ACTION, agent_id=agent.id, body_requires_approval=True)
    calls = [ToolCallSpec("note", {"text": "asked"}), ToolCallSpec(ACTION, {"content": "pay"})]
    fake_llm.push(Reply(tool_calls=calls))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "pay and note it"}]
    )
    kinds = [m.message_type for m in resp.messages]
    assert kinds == ["user_message", "tool_call_message", "approval_request_message"] or kinds == [
        "tool_call_message",
        "approval_request_message",
    ]
    free = next(m for m in resp.messages if m.message_type == "tool_call_message")
    req = next(m for m in resp.messages if m.message_type == "approval_request_message")
    assert free.tool_call.name == "note"  # type: ignore[union-attr]
    assert [c.name for c in req.tool_calls] == [ACTION]  # type: ignore[union-attr]
    assert not [m for m in resp.messages if m.message_type == "tool_return_message"]
    listed = [m.message_type for m in client.agents.messages.list(agent_id=agent.id, order="asc")]
    assert listed[-2:] == ["tool_call_message", "approval_request_message"]  # stored alike

    fake_llm.requests.clear()
    fake_llm.push(Reply(text="I noted it and did not pay."))
    deny = {"type": "approval", "tool_call_id": req.tool_call.tool_call_id, "approve": False}  # type: ignore[union-attr]
    resp2 = client.agents.messages.create(
        agent_id=agent.id, messages=[{"type": "approval", "approvals": [deny]}]
    )
    rets = {
        m.name: (m.status, str(m.tool_return))  # type: ignore[union-attr]
        for m in resp2.messages
        if m.message_type == "tool_return_message"
    }
    assert rets["note"] == ("success", "noted asked")
    assert rets[ACTION][0] == "error" and stored(client, agent.id) == []
    # the model knows: both results are in its next request
    tools_seen = [m for m in fake_llm.requests[0]["messages"] if m["role"] == "tool"]
    assert len(tools_seen) == 2 and any("noted asked" in m["content"] for m in tools_seen)
    assert any("request to call tool denied" in m["content"] for m in tools_seen)
