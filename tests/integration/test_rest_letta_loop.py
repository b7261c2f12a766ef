"""Letta's v1 loop as its clients read it: a step's parallel tool calls as ONE tool_call_message,
send_message as the assistant message it says (or, with `use_assistant_message: false`, the
call and its return), Letta's otids, agent history pages read oldest first; and the agent's
model outside a turn (`/generate`, `/messages/preview-raw-payload`) with their bad input.
letta-client 1.12.1 strict and raw HTTP against a live gateway and the loopback model."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import Letta

from tests.integration.test_rest_conversations import make_user
from tests.integration.test_rest_letta_client import strict
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread


@pytest.fixture
def gw(gateway_factory, sqlite_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=sqlite_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    return srv


@pytest.fixture
def client(gw: ServerThread) -> Letta:
    return Letta(base_url=gw.url, api_key="k", timeout=60, _strict_response_validation=True)


@pytest.fixture
def http(gw: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, timeout=60) as h:
        yield h


def otid_index(otid: str | None) -> int:
    assert otid is not None
    return uuid.UUID(otid).int & 0x7F


def test_parallel_calls_are_one_tool_call_message(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake", tools=["conversation_search"])
    fake_llm.push(
        Reply(
            text="Looking.",
            tool_calls=[
                ToolCallSpec("conversation_search", {"query": "tea"}),
                ToolCallSpec("conversation_search", {"query": "coffee"}),
            ],
        ),
        Reply(text="Found nothing."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "search", "otid": "my-otid"}]
    )
    kinds = [m.message_type for m in resp.messages]
    assert kinds == [
        "assistant_message",
        "tool_call_message",
        "tool_return_message",
        "tool_return_message",
        "assistant_message",
    ]
    text, calls, r1, r2, last = resp.messages
    assert [c.arguments for c in calls.tool_calls] == ['{"query": "tea"}', '{"query": "coffee"}']
    assert calls.tool_call.tool_call_id == calls.tool_calls[0].tool_call_id
    assert {r1.tool_call_id, r2.tool_call_id} == {c.tool_call_id for c in calls.tool_calls}
    # Letta's otids: the stored message's id with the index of the Letta message made from it
    assert text.id == calls.id and otid_index(text.otid) == 0 and otid_index(calls.otid) == 1
    assert otid_index(r1.otid) == 0 and otid_index(last.otid) == 0 and r1.otid != r2.otid
    assert str(uuid.UUID(calls.otid).int >> 7) == str(uuid.UUID(calls.id[8:]).int >> 7)
    listed = client.agents.messages.list(agent_id=agent.id).items  # oldest first
    assert [m.message_type for m in listed] == ["system_message", "user_message", *kinds]
    assert listed[1].otid == "my-otid"
    assert [m.otid for m in listed[2:]] == [m.otid for m in resp.messages]


def test_send_message_as_assistant_message(
    client: Letta, http: httpx.Client, fake_llm: FakeLLM
) -> None:
    send = strict(client.tools.list(name="send_message"))[0]
    agent = client.agents.create(model="openai/fake", tool_ids=[send.id], include_base_tools=False)
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("send_message", {"message": "Hello."})]))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "hi"}]
    )
    assert [(m.message_type, m.content) for m in resp.messages] == [("assistant_message", "Hello.")]
    assert otid_index(resp.messages[0].otid) == 0
    raw = http.get(
        f"/v1/agents/{agent.id}/messages", params={"use_assistant_message": "false"}
    ).json()
    assert [m["message_type"] for m in raw] == [
        "system_message",
        "user_message",
        "tool_call_message",
        "tool_return_message",
    ]
    assert raw[2]["tool_call"]["name"] == "send_message"
    bad = http.get(f"/v1/agents/{agent.id}/messages", params={"use_assistant_message": "maybe"})
    assert bad.status_code == 422
    both = http.post(
        f"/v1/agents/{agent.id}/messages",
        json={"input": "a", "messages": [{"role": "user", "content": "b"}]},
    )
    assert both.status_code == 422 and "either" in both.json()["detail"]
    wrong = http.post(
        f"/v1/agents/{agent.id}/messages", json={"input": "a", "use_assistant_message": "no"}
    )
    assert wrong.status_code == 422


def test_generate(client: Letta, http: httpx.Client, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    fake_llm.push(Reply(text="Four."))
    r = http.post(
        f"/v1/agents/{agent.id}/generate",
        json={"prompt": "What is 2+2?", "system_prompt": "Answer in one word."},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"] == "Four." and body["model"] == "openai/fake"
    assert body["usage"]["total_tokens"] > 0 and body["usage"]["prompt_tokens"] > 0
    sent = fake_llm.requests[-1]["messages"]
    assert sent == [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "What is 2+2?"},
    ]
    listed = client.agents.messages.list(agent_id=agent.id).items
    assert [m.message_type for m in listed] == ["system_message"]  # nothing stored
    fake_llm.push(Reply(text="Hi."))
    r = http.post(
        f"/v1/agents/{agent.id}/generate", json={"prompt": "hi", "override_model": "openai/other"}
    )
    assert r.status_code == 200 and r.json()["model"] == "openai/other"
    assert fake_llm.requests[-1]["model"] == "other"


def test_generate_and_preview_bad_input(gateway_factory, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    key_a, key_b = make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")
    srv = gateway_factory(database_url=sqlite_url, api_key="server-secret")
    alice = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key_a}"})
    bob = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key_b}"})
    try:
        agent = alice.post("/v1/agents", json={"model": "scripted/demo"}).json()["id"]
        gen, pre = (
            f"/v1/agents/{agent}/generate",
            f"/v1/agents/{agent}/messages/preview-raw-payload",
        )
        ok_pre = {"messages": [{"role": "user", "content": "hi"}]}
        for who, path, body in (
            (bob, gen, {"prompt": "hi"}),  # another user's agent: as unknown
            (bob, pre, ok_pre),
            (
                alice,
                "/v1/agents/agent-00000000-0000-4000-8000-000000000000/generate",
                {"prompt": "x"},
            ),
            (alice, "/v1/agents/agent-nope/messages/preview-raw-payload", ok_pre),
            (alice, gen, {"prompt": "hi", "override_model": "invalid/model-that-does-not-exist"}),
            (alice, pre, {**ok_pre, "conversation_id": "conv-unknown"}),
        ):
            r = who.post(path, json=body)
            assert r.status_code == 404, (path, body, r.text)
            assert "not found" in r.json()["detail"].lower()
        bad: list[tuple[str, Any]] = [
            (gen, {"prompt": ""}),
            (gen, {"prompt": "   \n\t "}),
            (gen, {"prompt": 5}),
            (gen, {}),
            (gen, {"prompt": "hi", "system_prompt": ["x"]}),
            (gen, [1]),
            (pre, {"messages": "hi"}),
            (pre, {"messages": []}),
            (pre, {"messages": [{"role": "user", "content": "hi"}], "input": "x"}),
        ]
        for path, body in bad:
            r = alice.post(path, json=body)
            assert r.status_code == 422, (path, body, r.text)
        assert alice.post(gen, content=b"").status_code == 400
    finally:
        alice.close()
        bob.close()


def test_preview_raw_payload(client: Letta, http: httpx.Client, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(
        model="openai/gpt-4o-mini",
        memory_blocks=[{"label": "human", "value": "username: sarah"}],
        tools=["conversation_search"],
        include_base_tools=False,
    )
    fake_llm.push(Reply(text="Hello Sarah."))
    client.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": "hi"}])
    asked = len(fake_llm.requests)
    r = http.post(
        f"/v1/agents/{agent.id}/messages/preview-raw-payload",
        json={"messages": [{"role": "user", "content": [{"type": "text", "text": "again"}]}]},
    )
    assert r.status_code == 200, r.text
    payload = r.json()
    assert len(fake_llm.requests) == asked  # no model was called
    assert payload["model"] == "gpt-4o-mini"
    roles = [m["role"] for m in payload["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert "username: sarah" in payload["messages"][0]["content"]
    assert payload["messages"][-1]["content"] == "again"
    assert [t["function"]["name"] for t in payload["tools"]] == ["conversation_search"]
    assert payload["user"].startswith("user-")
    assert len(client.agents.messages.list(agent_id=agent.id).items) == 3  # nothing stored


def test_conversation_system_message(client: Letta, http: httpx.Client, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(
        model="openai/fake", memory_blocks=[{"label": "human", "value": "Name: Ada"}]
    )
    conv = client.conversations.create(agent_id=agent.id)
    ids = client.conversations.retrieve(conv.id).in_context_message_ids or []
    listed = list(client.conversations.messages.list(conv.id, order="asc"))
    assert [m.message_type for m in listed] == ["system_message"] and ids == [listed[0].id]
    assert "Name: Ada" in listed[0].content  # type: ignore[union-attr]
    client.agents.blocks.update("human", agent_id=agent.id, value="Name: Grace")
    fake_llm.push(Reply(text="Hi Grace."))
    list(client.conversations.messages.create(conv.id, input="hello"))
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]  # the stored one is not sent
    assert "Name: Grace" in sent[0]["content"]  # each turn compiles the blocks as they are
    first = next(iter(client.conversations.messages.list(conv.id, order="asc")))
    assert "Name: Ada" in first.content  # type: ignore[union-attr]
    r = http.post(f"/v1/conversations/{conv.id}/recompile", params={"dry_run": "true"})
    assert r.status_code == 200 and "Name: Grace" in r.json()
    first = next(iter(client.conversations.messages.list(conv.id, order="asc")))
    assert "Name: Ada" in first.content  # type: ignore[union-attr]
    assert http.post(f"/v1/conversations/{conv.id}/recompile").status_code == 200
    first = next(iter(client.conversations.messages.list(conv.id, order="asc")))
    assert first.id == ids[0] and "Name: Grace" in first.content  # type: ignore[union-attr]
    found = http.post("/v1/messages/search", json={"query": "Grace"}).json()
    assert all(m["message_type"] != "system_message" for m in found)
