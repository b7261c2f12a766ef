"""Letta's per-tool `return_char_limit`: stored on the tool record (migration 0009), round-trips
through the tools REST API and agent files (letta-client 1.12.1, strict), and cuts a tool's
return in a turn with Letta's note; without one the server's VG_TOOL_RETURN_CHAR_LIMIT holds."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from letta_client import Letta, UnprocessableEntityError

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec

BIG = 'def big_return() -> str:\n    """Big."""\n    return "x" * 100000\n'
OTHER = 'def other_big() -> str:\n    """Big too."""\n    return "y" * 100000\n'


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(
        database_url=db_url,
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        tool_return_char_limit=1000,
    )
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def test_the_limit_round_trips_through_the_tools_api(client: Letta) -> None:
    tool = client.tools.create(source_code=BIG, return_char_limit=200)
    assert tool.return_char_limit == 200
    assert client.tools.retrieve(tool.id).return_char_limit == 200
    assert [t.return_char_limit for t in client.tools.list(name="big_return")] == [200]
    assert client.tools.upsert(source_code=BIG, return_char_limit=300).return_char_limit == 300
    assert client.tools.update(tool.id, return_char_limit=150).return_char_limit == 150
    assert client.tools.update(tool.id, tags=["a"]).return_char_limit == 150  # unchanged
    assert client.tools.update(tool.id, return_char_limit=None).return_char_limit is None
    for bad in (0, -5, 1_000_001):
        with pytest.raises(UnprocessableEntityError) as err:
            client.tools.update(tool.id, return_char_limit=bad)
        assert "return_char_limit" in str(err.value.body)
        with pytest.raises(UnprocessableEntityError):
            client.tools.create(source_code=OTHER, return_char_limit=bad)
    assert client.tools.retrieve(tool.id).return_char_limit is None  # nothing written
    assert list(client.tools.list(name="other_big")) == []


def test_a_turn_cuts_each_tool_at_its_own_limit(client: Letta, fake_llm: FakeLLM) -> None:
    own = client.tools.create(source_code=BIG, return_char_limit=150)
    server = client.tools.create(source_code=OTHER)
    agent = client.agents.create(
        model="openai/fake", tool_ids=[own.id, server.id], include_base_tools=False
    )
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("big_return", {})]),
        Reply(text="Big."),
        Reply(tool_calls=[ToolCallSpec("other_big", {})]),
        Reply(text="Big too."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "call big_return"}]
    )
    ret = resp.messages[1]
    assert ret.status == "success"
    assert ret.tool_return == (
        "x" * 150 + "... [NOTE: function output was truncated since it exceeded the character "
        "limit (100000 > 150)]"
    )
    sent = json.loads(fake_llm.requests[1]["messages"][-1]["content"])  # what the model read
    assert sent["func_return"] == ret.tool_return
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "call other_big"}]
    )
    assert resp.messages[1].tool_return.endswith("(100000 > 1000)]")
    assert resp.messages[1].tool_return.startswith("y" * 1000 + "... [NOTE")


def test_agent_files_carry_the_limit(client: Letta) -> None:
    own = client.tools.create(source_code=BIG, return_char_limit=150)
    agent = client.agents.create(model="openai/fake", tool_ids=[own.id])
    exported = client.agents.export_file(agent.id)
    af = json.loads(exported) if isinstance(exported, str) else exported
    [tool] = [t for t in af["tools"] if t["name"] == "big_return"]
    assert tool["return_char_limit"] == 150
    tool["return_char_limit"] = 77
    client.agents.import_file(file=("a.af", json.dumps(af).encode()), override_existing_tools=True)
    assert client.tools.retrieve(own.id).return_char_limit == 77
