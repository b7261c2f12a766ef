"""Conversations and shared blocks through letta-client 1.12.1 in strict mode (every response
validated against the SDK's models) on a live gateway, and their bad input.

Agent responses (agents.create, blocks attach/detach) are validated strictly too, unless the
only failure is `embedding_config.embedding_endpoint_type` ("local" until protocol/letta.py
reports "hugging-face", fixed on another branch): then they are read without strict mode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from letta_client import APIResponseValidationError, BadRequestError, ConflictError, Letta
from letta_client.types import AgentState

from memory.service import Memory
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.servers import ServerThread


class Clients:
    def __init__(self, url: str, key: str) -> None:
        self.strict = Letta(base_url=url, api_key=key, timeout=60, _strict_response_validation=True)
        self.plain = Letta(base_url=url, api_key=key, timeout=60)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"})

    def agent_call(self, call: Callable[[Letta], Any]) -> Any:
        """Strict; if the only validation error is the embedding endpoint type, the same
        response read without validation (the call is not repeated)."""
        try:
            return call(self.strict)
        except APIResponseValidationError as exc:
            errors = exc.__cause__.errors() if hasattr(exc.__cause__, "errors") else None
            assert errors, exc
            assert all("embedding_endpoint_type" in map(str, e["loc"]) for e in errors), errors
            return AgentState.construct(**exc.body)  # type: ignore[arg-type]


@pytest.fixture
def gw(gateway_factory, sqlite_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=sqlite_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    return srv


@pytest.fixture
def c(gw: ServerThread) -> Iterator[Clients]:
    clients = Clients(gw.url, "any-key-on-loopback")
    yield clients
    clients.http.close()


def new_agent(c: Clients, **kw: Any) -> Any:
    return c.agent_call(lambda cl: cl.agents.create(model="openai/fake", **kw))


def test_conversations_strict(c: Clients, fake_llm: FakeLLM) -> None:
    agent = new_agent(c)
    s = c.strict
    conv = s.conversations.create(agent_id=agent.id, summary="first", extra_body={"caller": "u1"})
    assert conv.agent_id == agent.id and conv.summary == "first"
    assert s.conversations.retrieve(conv.id).id == conv.id
    assert conv.id in [x.id for x in s.conversations.list(agent_id=agent.id)]
    assert s.conversations.update(conv.id, summary="renamed").summary == "renamed"

    chunks = list(s.conversations.messages.create(conv.id, input="my word is heliotrope"))
    types = [ch.message_type for ch in chunks]
    assert types == ["assistant_message", "stop_reason", "usage_statistics"]
    assert "heliotrope" in chunks[0].content  # type: ignore[union-attr]
    tokens = list(s.conversations.messages.create(conv.id, input="again", stream_tokens=True))
    assert tokens[-1].message_type == "usage_statistics"
    listed = list(s.conversations.messages.list(conv.id, order="asc"))
    assert [m.message_type for m in listed] == ["system_message"] + [
        "user_message",
        "assistant_message",
    ] * 2  # Letta's: the conversation's system message first
    # resume (Letta's rule): a run that ended replays only if it ran in the background
    with pytest.raises(BadRequestError, match="not created in background mode"):
        list(s.conversations.messages.stream(conv.id))
    empty = s.conversations.create(agent_id=agent.id)
    with pytest.raises(BadRequestError, match="No active runs found"):
        list(s.conversations.messages.stream(empty.id))
    with pytest.raises(BadRequestError, match="no messages in context to compact"):
        s.conversations.messages.compact(empty.id)
    assert c.http.post(f"/v1/conversations/{empty.id}/recompile").status_code == 200  # no body

    ctx = s.conversations.retrieve(conv.id).in_context_message_ids or []
    fork = s.conversations.fork(conv.id)
    assert fork.id != conv.id and len(fork.in_context_message_ids or []) == len(ctx) == 5
    assert fork.identity_id == conv.identity_id  # type: ignore[attr-defined]
    fake_llm.requests.clear()
    fake_llm.push(Reply(text="The user's word is heliotrope."))
    compacted = s.conversations.messages.compact(conv.id)
    assert compacted.num_messages_before == 4 and compacted.num_messages_after == 1
    assert compacted.summary == "The user's word is heliotrope."
    assert "my word is heliotrope" in str(fake_llm.requests[0]["messages"])  # what it folded
    after = s.conversations.retrieve(conv.id).in_context_message_ids or []
    assert len(after) == 2 and after[0] == ctx[0] and after[1] not in ctx  # system, summary
    prompt = s.conversations.recompile(conv.id, dry_run=True)
    assert isinstance(prompt, str) and "<memory_blocks>" in prompt
    with pytest.raises(ConflictError, match="No active runs to cancel"):  # nothing running
        s.conversations.cancel(conv.id)

    # the other conversations of the agent never saw this one's words
    fake_llm.requests.clear()
    other = s.conversations.create(agent_id=agent.id)
    list(s.conversations.messages.create(other.id, input="hello"))
    assert "heliotrope" not in str(fake_llm.requests)
    # `default` with the agent named: the agent routes' conversation
    list(s.conversations.messages.create("default", agent_id=agent.id, input="via default"))
    via_agent = c.plain.agents.messages.list(agent_id=agent.id)
    assert "via default" in [getattr(m, "content", None) for m in via_agent]

    s.conversations.delete(fork.id)
    assert fork.id not in [x.id for x in s.conversations.list(agent_id=agent.id)]
    assert c.http.get(f"/v1/conversations/{fork.id}").status_code == 404


def test_cancel_stops_a_running_turn(c: Clients, fake_llm: FakeLLM) -> None:
    agent = new_agent(c)
    conv = c.strict.conversations.create(agent_id=agent.id)
    fake_llm.push(Reply(text="one two three four five six seven", chunk_delay_s=1.0))

    async def run() -> tuple[int, dict[str, Any], dict[str, Any]]:
        async with httpx.AsyncClient(base_url=c.http.base_url, timeout=60) as http:
            send = asyncio.create_task(
                http.post(
                    f"/v1/conversations/{conv.id}/messages",
                    json={"input": "count slowly", "streaming": False},
                )
            )
            for _ in range(100):  # until the model has started answering
                await asyncio.sleep(0.05)
                if fake_llm.requests:
                    break
            await asyncio.sleep(1.5)
            cancelled = (await http.post(f"/v1/conversations/{conv.id}/cancel")).json()
            reply = await send
            return reply.status_code, reply.json(), cancelled

    status, reply, cancelled = asyncio.run(run())
    assert status == 200 and len(cancelled) == 1
    assert list(cancelled.values()) == ["cancelled"]
    assert reply["stop_reason"]["stop_reason"] == "cancelled"
    stored = c.http.get(f"/v1/conversations/{conv.id}/messages", params={"order": "asc"}).json()
    assert stored[0]["message_type"] == "system_message"
    assert stored[1]["content"] == "count slowly"
    # the turn kept what it had produced, cut short
    assert stored[2]["message_type"] == "assistant_message" and stored[2]["truncated"] is True
    assert "seven" not in stored[1]["content"]


def test_shared_blocks_strict(c: Clients, fake_llm: FakeLLM) -> None:
    a1, a2 = new_agent(c), new_agent(c)
    s = c.strict
    block = s.blocks.create(label="policy", value="Opening hours: 9 to 5.")
    assert s.blocks.retrieve(block.id).value == "Opening hours: 9 to 5."
    assert block.id in [b.id for b in s.blocks.list()]
    for agent in (a1, a2):
        out = c.agent_call(lambda cl, a=agent: cl.agents.blocks.attach(block.id, agent_id=a.id))
        assert "policy" in [b.label for b in out.memory.blocks]
    again = c.agent_call(lambda cl: cl.agents.blocks.attach(block.id, agent_id=a1.id))
    assert [b.label for b in again.memory.blocks].count("policy") == 1  # idempotent
    listed = c.plain.agents.blocks.list(agent_id=a1.id)
    assert "policy" in [b.label for b in listed]
    assert c.plain.agents.blocks.retrieve("policy", agent_id=a2.id).id == block.id

    assert s.blocks.update(block.id, value="Opening hours: 8 to 8.").value.endswith("8 to 8.")
    fake_llm.requests.clear()
    for agent in (a1, a2):
        c.plain.agents.messages.create(agent_id=agent.id, input="when are you open?")
    systems = [r["messages"][0]["content"] for r in fake_llm.requests]
    assert len(systems) == 2 and all("8 to 8." in p and "9 to 5" not in p for p in systems)

    out = c.agent_call(lambda cl: cl.agents.blocks.detach(block.id, agent_id=a1.id))
    assert "policy" not in [b.label for b in out.memory.blocks]
    s.blocks.delete(block.id)
    assert c.http.get(f"/v1/blocks/{block.id}").status_code == 404
    assert "policy" not in [b.label for b in c.plain.agents.blocks.list(agent_id=a2.id)]


def test_block_bad_input(c: Clients) -> None:
    agent = new_agent(c)
    block = c.strict.blocks.create(label="faq", value="x")
    a = f"/v1/agents/{agent.id}/core-memory/blocks"
    r = c.http.patch(f"{a}/detach/{block.id}")
    assert r.status_code == 404 and "detail" in r.json()
    assert c.http.patch(f"{a}/attach/block-nope").status_code == 404
    human = c.strict.blocks.create(label="human", value="clash")  # the agent has a `human`
    r = c.http.patch(f"{a}/attach/{human.id}")
    assert r.status_code == 409 and "human" in r.json()["detail"]


def make_user(db_url: str, name: str) -> str:
    async def main() -> str:
        memory = await Memory.open(db_url)
        try:
            return (await memory.users.create(name))[1]
        finally:
            await memory.close()

    return asyncio.run(main())


def test_conversation_scoping(gateway_factory, sqlite_url: str) -> None:  # type: ignore[no-untyped-def]
    key_a, key_b = make_user(sqlite_url, "alice"), make_user(sqlite_url, "bob")
    srv = gateway_factory(database_url=sqlite_url, api_key="server-secret")
    alice, bob = Clients(srv.url, key_a), Clients(srv.url, key_b)
    try:
        a1 = alice.agent_call(lambda cl: cl.agents.create(model="openai/fake"))
        a2 = alice.agent_call(lambda cl: cl.agents.create(model="openai/fake"))
        b1 = bob.agent_call(lambda cl: cl.agents.create(model="openai/fake"))
        conv = alice.strict.conversations.create(agent_id=a1.id)
        # unknown id, and alice's id with bob's key: the same 404
        for who, cid in ((alice, "conv-unknown"), (bob, conv.id)):
            for method, path in (
                ("GET", f"/v1/conversations/{cid}"),
                ("PATCH", f"/v1/conversations/{cid}"),
                ("DELETE", f"/v1/conversations/{cid}"),
                ("GET", f"/v1/conversations/{cid}/messages"),
                ("POST", f"/v1/conversations/{cid}/messages"),
                ("POST", f"/v1/conversations/{cid}/cancel"),
                ("POST", f"/v1/conversations/{cid}/fork"),
                ("POST", f"/v1/conversations/{cid}/compact"),
            ):
                r = who.http.request(method, path, json={"input": "hi", "summary": "x"})
                assert r.status_code == 404, (method, path, r.text)
                assert "not found" in r.json()["detail"]
        assert conv.id not in [x.id for x in bob.strict.conversations.list()]
        assert [x.agent_id for x in alice.strict.conversations.list()].count(a1.id) >= 1
        r = bob.http.post(f"/v1/conversations/?agent_id={a1.id}", json={})
        assert r.status_code == 404
        r = bob.http.post("/v1/conversations/default/messages", json={"agent_id": a1.id})
        assert r.status_code == 404
        # alice's conversation of a1 named on her other agent's routes
        r = alice.http.post(
            f"/v1/agents/{a2.id}/messages", json={"input": "hi", "conversation_id": conv.id}
        )
        assert r.status_code == 404
        r = alice.http.get(f"/v1/conversations/{conv.id}", params={"agent_id": a2.id})
        assert r.status_code == 404
        assert b1.id  # bob's own agent works for him
        assert bob.strict.conversations.create(agent_id=b1.id).agent_id == b1.id
    finally:
        alice.http.close()
        bob.http.close()


@pytest.mark.parametrize(
    "caller",
    ["x" * 129, "bad\x00key", "line\nbreak", "tab\there", "", "   ", "zero\u200bwidth"],
)
def test_bad_caller_keys(c: Clients, caller: str) -> None:
    agent = new_agent(c)
    r = c.http.post(f"/v1/conversations/?agent_id={agent.id}", json={"caller": caller})
    assert r.status_code == 400, r.text
    assert "caller key" in r.json()["detail"]
    r = c.http.post("/v1/identities/", json={"identifier_key": caller})
    assert r.status_code == 400, r.text
    assert c.http.get("/v1/identities/").json() == []  # nothing was made
