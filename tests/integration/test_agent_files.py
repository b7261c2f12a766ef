"""Agent files (Letta's `.af`, v2) through letta-client 1.12.1 in strict mode on a live gateway:
a Letta 0.16 export (written below as Letta writes one) imports with its blocks, messages,
custom tool and tool rules, talks by text with its history in the model's request, exports in
the shape Letta's importer requires, and imports again equal. Bad files: 422 naming the first
problem (413 over the size limit) and nothing written to the database."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import Letta, UnprocessableEntityError
from sqlalchemy import func, select

from memory.orm import Agent, Block, Conversation, Message, Tool
from memory.service import Memory
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.letta_agent_file import AgentFileSchema, check_references
from tests.support.letta_export import RULES, SOURCE, letta_file
from tests.support.servers import ServerThread


@pytest.fixture
def srv(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=db_url,
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        max_file_bytes=60_000,
    )


@pytest.fixture
def client(srv: ServerThread) -> Iterator[Letta]:
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def upload(client: Letta, af: dict[str, Any] | bytes, **opts: Any) -> str:
    raw = af if isinstance(af, bytes) else json.dumps(af).encode()
    resp = client.agents.import_file(file=("agent.af", raw, "application/json"), **opts)
    assert len(resp.agent_ids) == 1
    return resp.agent_ids[0]


def canonical(af: dict[str, Any]) -> dict[str, Any]:
    """What must survive a round trip: blocks, messages (but the compiled system prompt),
    tools (custom ones with source) and tool rules, without the file's own ids and times."""
    agent = af["agents"][0]
    blocks = {b["id"]: b for b in af["blocks"]}
    tools = {t["id"]: t for t in af["tools"]}

    def text(m: dict[str, Any]) -> str:
        return "".join(p.get("text", "") for p in m["content"] if p["type"] == "text")

    return {
        "blocks": sorted(
            (blocks[i]["label"], blocks[i]["value"], blocks[i]["description"])
            for i in agent["block_ids"]
        ),
        "tools": sorted(
            (tools[i]["name"], tools[i]["source_code"])
            for i in agent["tool_ids"]
            if tools[i]["name"] != "web_search"
        ),
        "rules": agent["tool_rules"],
        "messages": [
            (
                m["role"],
                text(m),
                "".join(p.get("reasoning", "") for p in m["content"] if p["type"] == "reasoning"),
                [
                    (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in m["tool_calls"] or []
                ],
                m["tool_call_id"],
                m["created_at"][:19],
            )
            for m in agent["messages"][1:]
        ],
        "tags": agent["tags"],
        "system": agent["system"],
    }


def exported(client: Letta, agent_id: str, **query: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(client.agents.export_file(agent_id=agent_id, **query))
    check_references(AgentFileSchema.model_validate(body))  # what Letta's importer requires
    return body


def test_letta_file_round_trip_and_text_turn(client: Letta, fake_llm: FakeLLM) -> None:
    original = letta_file()
    agent_id = upload(client, original)
    agent = client.agents.retrieve(agent_id=agent_id)
    assert agent.name == "ada-support" and agent.model == "openai/gpt-4o-mini"
    assert {b.label: b.value for b in agent.memory.blocks} == {
        "human": "Name: Ada. Customer since 2021.",
        "persona": "I am a patient support agent.",
    }
    assert [t.name for t in agent.tools] == [
        "lookup_order",
        "conversation_search",
        "core_memory_append",
    ]
    # the rules are the agent's own, enforced by the loop (not parked in metadata)
    assert [r.to_dict(exclude_none=True) for r in agent.tool_rules or []] == RULES
    assert agent.metadata is not None and "tool_rules" not in agent.metadata
    assert agent.metadata["import_skipped_tools"] == ["web_search"]
    tool = next(t for t in agent.tools if t.name == "lookup_order")
    assert tool.tool_type == "custom" and tool.source_code == SOURCE

    first = exported(client, agent_id)
    assert canonical(first) == canonical(original)
    again = upload(client, first)
    assert again != agent_id
    assert canonical(exported(client, again)) == canonical(first)

    fake_llm.push(Reply(text="You prefer email, Ada."))
    resp = client.agents.messages.create(
        agent_id=agent_id,
        messages=[{"role": "user", "content": "How do I prefer to be contacted?"}],
    )
    assert resp.messages[-1].content == "You prefer email, Ada."
    sent = [
        (m["role"], m.get("content"), m.get("tool_call_id"))
        for m in fake_llm.requests[-1]["messages"]
    ]
    history = [
        ("user", "Hi, I'm Ada. Where is my order 1042?", None),
        ("assistant", None, None),
        ("tool", "Order 1042: shipped on Monday", "call_lookup1"),
        ("assistant", "Your order 1042 shipped on Monday.", None),
        ("user", "Thanks! Remember that I prefer email.", None),
        ("assistant", None, None),
        ("tool", "None", "call_mem2"),
        ("assistant", "Noted: email it is.", None),
        ("user", "How do I prefer to be contacted?", None),
    ]
    assert sent[-len(history) :] == history
    calls = [
        m["tool_calls"][0]["id"] for m in fake_llm.requests[-1]["messages"] if m.get("tool_calls")
    ]
    assert calls == ["call_lookup1", "call_mem2"]
    assert "Name: Ada. Customer since 2021." in fake_llm.requests[-1]["messages"][0]["content"]
    after = exported(client, agent_id)  # the new turn is exported after the imported history
    assert [m["role"] for m in after["agents"][0]["messages"][-2:]] == ["user", "assistant"]


def test_import_options(client: Letta) -> None:
    af = letta_file()
    a = upload(
        client,
        af,
        name="bob",
        append_copy_suffix=True,
        model="scripted/demo",
        strip_messages=True,
        project_id="ignored",
    )
    agent = client.agents.retrieve(agent_id=a)
    assert agent.name == "bob_copy" and agent.model == "scripted/demo"
    assert exported(client, a)["agents"][0]["messages"][1:] == []
    b = upload(client, af, embedding="local/all-minilm-l6-v2", override_name="carol")
    agent = client.agents.retrieve(agent_id=b)
    assert agent.name == "carol" and agent.embedding == "local/all-minilm-l6-v2"
    scrubbed = exported(client, b, scrub_messages=True)
    assert len(scrubbed["agents"][0]["messages"]) == 1  # the system prompt only
    # a tool of the same name is replaced by the file's (Letta's default) or kept
    changed = copy.deepcopy(af)
    changed["tools"][0]["source_code"] = SOURCE.replace("shipped on Monday", "delivered")
    upload(client, changed, override_existing_tools=False)
    assert (
        "shipped on Monday" in next(t for t in client.tools.list(name="lookup_order")).source_code
    )
    upload(client, changed)
    assert "delivered" in next(t for t in client.tools.list(name="lookup_order")).source_code


def test_export_unknown_conversation_is_404(srv: ServerThread, client: Letta) -> None:
    agent_id = upload(client, letta_file())
    resp = httpx.get(
        f"{srv.url}/v1/agents/{agent_id}/export", params={"conversation_id": "conv-nope"}
    )
    assert resp.status_code == 404 and "conv-nope" in resp.json()["detail"]
    assert httpx.get(f"{srv.url}/v1/agents/agent-nope/export").status_code == 404


def _bad(change: str) -> bytes:
    af = letta_file()
    if change == "not-json":
        return b"agents: [this is YAML, not JSON"
    if change == "array":
        return b"[1, 2, 3]"
    if change == "foreign":  # an OpenAI assistant definition
        return json.dumps(
            {"object": "assistant", "model": "gpt-4o", "instructions": "Help.", "tools": []}
        ).encode()
    if change == "legacy":
        return json.dumps(
            {"name": "old", "core_memory": [], "llm_config": {}, "messages": [], "tools": []}
        ).encode()
    if change == "role":
        af["agents"][0]["messages"][3]["role"] = "robot"
    elif change == "block-ref":
        af["agents"][0]["block_ids"].append("block-9")
    elif change == "source":
        af["tools"][0]["source_code"] = "def lookup_order(order_id: int) -> str:\n    return (\n"
    elif change == "over-limit":
        af["blocks"][1]["limit"] = 5
    elif change == "provider":
        af["agents"][0]["llm_config"]["handle"] = "anthropic/claude-sonnet-4-5"
    elif change == "rule":
        af["agents"][0]["tool_rules"] = [{"tool_name": "lookup_order", "type": "sometimes"}]
    return json.dumps(af).encode()


BAD = {
    "not-json": "not valid JSON",
    "array": "is a list, not an object",
    "foreign": "no 'agents' list",
    "legacy": "legacy single-agent (v1)",
    "role": "agents.0.messages.3.role",
    "block-ref": "agents.0.block_ids: 'block-9'",
    "source": "tools.0 (lookup_order): source_code has a syntax error",
    "over-limit": "blocks.1 (persona)",
    "provider": "model provider 'anthropic' is not configured",
    "rule": "agents.0.tool_rules.0.type",
}


def counts(
    db_url: str, tables: tuple[Any, ...] = (Agent, Block, Conversation, Message, Tool)
) -> dict[str, int]:
    """Rows per table: a refused import must leave every count as it was."""

    async def run() -> dict[str, int]:
        memory = await Memory.open(db_url, migrate=False)
        try:
            async with memory.db.read() as s:
                return {
                    t.__tablename__: int(await s.scalar(select(func.count()).select_from(t)) or 0)
                    for t in tables
                }
        finally:
            await memory.close()

    return asyncio.run(run())


@pytest.mark.parametrize("change", sorted(BAD))
def test_bad_file_is_422_and_imports_nothing(srv: ServerThread, db_url: str, change: str) -> None:
    before = counts(db_url)
    resp = httpx.post(
        f"{srv.url}/v1/agents/import",
        files={"file": ("x.af", _bad(change), "application/json")},
        timeout=30,
    )
    assert resp.status_code == 422, resp.text
    assert BAD[change] in resp.json()["detail"]
    assert counts(db_url) == before


def test_bad_file_through_the_sdk(client: Letta) -> None:
    with pytest.raises(UnprocessableEntityError, match="no 'agents' list"):
        upload(client, b'{"assistant": {"name": "x"}}')
    assert client.agents.list().items == []


def test_oversized_file_is_413(srv: ServerThread, db_url: str) -> None:
    af = letta_file()
    af["blocks"][0]["value"] = "x" * 70_000  # the gateway here takes files of 60 000 bytes
    before = counts(db_url)
    resp = httpx.post(
        f"{srv.url}/v1/agents/import",
        files={"file": ("big.af", json.dumps(af).encode())},
        timeout=30,
    )
    assert resp.status_code == 413 and "60000 bytes" in resp.json()["detail"]
    assert counts(db_url) == before


def test_custom_tools_refused_where_the_sandbox_cannot_isolate(
    gateway_factory,  # type: ignore[no-untyped-def]
    db_url: str,
    fake_llm_url: str,
) -> None:
    srv = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="t", tool_namespaces=False
    )
    before = counts(db_url)
    resp = httpx.post(
        f"{srv.url}/v1/agents/import", files={"file": ("a.af", json.dumps(letta_file()))}
    )
    assert resp.status_code == 403 and "custom tools are disabled" in resp.json()["detail"]
    assert counts(db_url) == before
    af = letta_file()  # without its custom tool the same agent imports
    af["tools"] = af["tools"][1:]
    af["agents"][0]["tool_ids"].remove("tool-0")
    resp = httpx.post(f"{srv.url}/v1/agents/import", files={"file": ("a.af", json.dumps(af))})
    assert resp.status_code == 200, resp.text
    assert counts(db_url)["agents"] == before["agents"] + 1


def test_a_bad_second_agent_imports_neither(srv: ServerThread, db_url: str) -> None:
    af = letta_file()
    second = copy.deepcopy(af["agents"][0]) | {"id": "agent-1", "name": "second"}
    second["block_ids"] = ["block-0", "block-0"]  # two `human` blocks
    af["agents"].append(second)
    before = counts(db_url)
    resp = httpx.post(f"{srv.url}/v1/agents/import", files={"file": ("two.af", json.dumps(af))})
    assert resp.status_code == 422
    assert "a second block labelled 'human' on agents.1" in resp.json()["detail"]
    assert counts(db_url) == before
    second["block_ids"] = ["block-1"]
    resp = httpx.post(f"{srv.url}/v1/agents/import", files={"file": ("two.af", json.dumps(af))})
    ids = resp.json()["agent_ids"]
    assert len(ids) == 2 and counts(db_url)["agents"] == before["agents"] + 2
    names = {httpx.get(f"{srv.url}/v1/agents/{i}").json()["name"] for i in ids}
    assert names == {"ada-support", "second"}


def test_voice_and_call_control_fields_travel_with_the_file(
    srv: ServerThread, client: Letta, db_url: str
) -> None:
    """Our fields Letta has no place for (greeting, voice_default, transfer_targets, call_tools,
    voicemail_message) go out under the file's agent metadata `voice_gateway` and come back on
    import; a bad target or message in a file is a 422 that imports nothing."""
    fields = {
        "greeting": "Hello {name}!",
        "voice_default": True,
        "transfer_targets": {"front desk": "+15551230000", "billing": "sip:bill@pbx.example.com"},
        "call_tools": ["end_call", "transfer_call"],
        "voicemail_message": "Hi, it's the front desk; please call us back.",
    }
    made = httpx.post(
        f"{srv.url}/v1/agents/", json={"name": "desk", "model": "openai/x", **fields}, timeout=30
    )
    assert made.status_code in (200, 201), made.text
    af = exported(client, made.json()["id"])
    assert af["agents"][0]["metadata"]["voice_gateway"] == fields
    again = upload(client, af)
    body = httpx.get(f"{srv.url}/v1/agents/{again}", timeout=30).json()
    assert {k: body[k] for k in fields} == fields
    assert "voice_gateway" not in (body.get("metadata") or {})

    before = counts(db_url)
    bad = copy.deepcopy(af)
    bad["agents"][0]["metadata"]["voice_gateway"]["transfer_targets"] = {"desk": "call me maybe"}
    resp = httpx.post(
        f"{srv.url}/v1/agents/import",
        files={"file": ("x.af", json.dumps(bad).encode(), "application/json")},
        timeout=30,
    )
    assert resp.status_code == 422 and "agents[0]" in resp.json()["detail"], resp.text
    assert counts(db_url) == before
    bad = copy.deepcopy(af)
    bad["agents"][0]["metadata"]["voice_gateway"]["voicemail_message"] = "x" * 2001
    resp = httpx.post(
        f"{srv.url}/v1/agents/import",
        files={"file": ("x.af", json.dumps(bad).encode(), "application/json")},
        timeout=30,
    )
    assert resp.status_code == 422 and "voicemail_message" in resp.json()["detail"], resp.text
    assert counts(db_url) == before
