"""Tool rules through the official letta-client SDK against a live gateway: each rule type is
enforced by the one agent loop on the tool calls a scripted model makes (loopback fake OpenAI
server), a broken rule is Letta's `[ToolConstraintError]` tool error, and the rules round-trip
through agent create / update / retrieve. Two custom tools run in the real sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from letta_client import Letta, UnprocessableEntityError

from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread

LOOKUP = '''
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return "yes" if key == "y" else "no"
'''
NOTE = '''
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    return "noted " + text
'''


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv: ServerThread = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )
    c = Letta(
        base_url=srv.url,
        api_key="any-key-on-loopback",
        timeout=60,
        _strict_response_validation=True,
    )
    c.tools.create(source_code=LOOKUP)
    c.tools.create(source_code=NOTE)
    yield c


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, args)])


def agent_with(client: Letta, rules: list[dict[str, Any]], *extra: str) -> str:
    agent = client.agents.create(
        model="openai/fake",
        include_base_tools=False,
        tools=["lookup", "note", *extra],
        tool_rules=rules,  # type: ignore[arg-type]
    )
    return agent.id


def send(client: Letta, agent_id: str) -> list[Any]:
    resp = client.agents.messages.create(
        agent_id=agent_id, messages=[{"role": "user", "content": "go"}]
    )
    return list(resp.messages)


def returns(messages: list[Any]) -> list[tuple[str, str, str]]:
    return [
        (m.name, m.status, str(m.tool_return))
        for m in messages
        if m.message_type == "tool_return_message"
    ]


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def test_rules_round_trip_and_unknown_tool_is_422(client: Letta) -> None:
    rules = [
        {"type": "run_first", "tool_name": "lookup"},
        {"type": "constrain_child_tools", "tool_name": "lookup", "children": ["note"]},
        {"type": "max_count_per_step", "tool_name": "note", "max_count_limit": 2},
        {"type": "requires_approval", "tool_name": "note"},
    ]
    agent_id = agent_with(client, rules)
    got = client.agents.retrieve(agent_id).tool_rules or []
    assert [(r.type, r.tool_name) for r in got] == [(r["type"], r["tool_name"]) for r in rules]
    client.agents.update(agent_id, tool_rules=[{"type": "exit_loop", "tool_name": "note"}])  # type: ignore[list-item]
    got = client.agents.retrieve(agent_id).tool_rules or []
    assert [(r.type, r.tool_name) for r in got] == [("exit_loop", "note")]
    with pytest.raises(UnprocessableEntityError, match="unknown tools: nope"):
        client.agents.update(agent_id, tool_rules=[{"type": "exit_loop", "tool_name": "nope"}])  # type: ignore[list-item]
    with pytest.raises(UnprocessableEntityError, match="unknown tools: ghost"):
        agent_with(
            client, [{"type": "constrain_child_tools", "tool_name": "note", "children": ["ghost"]}]
        )
    with pytest.raises(UnprocessableEntityError, match="max_count_limit"):
        client.agents.update(
            agent_id, tool_rules=[{"type": "max_count_per_step", "tool_name": "note"}]
        )  # type: ignore[list-item]
    # the failed updates stored nothing
    assert [r.type for r in client.agents.retrieve(agent_id).tool_rules or []] == ["exit_loop"]


def test_init_rule_offers_only_the_first_tool_and_refuses_others(
    client: Letta, fake_llm: FakeLLM
) -> None:
    agent_id = agent_with(client, [{"type": "run_first", "tool_name": "lookup"}])
    fake_llm.push(call("note", text="a"), call("lookup", key="y"), Reply(text="done"))
    out = returns(send(client, agent_id))
    assert offered(fake_llm.requests[0]) == {"lookup"}
    assert out[0][:2] == ("note", "error")
    assert out[0][2].startswith(
        "[ToolConstraintError] Cannot call note, valid tools include: ['lookup']."
    )
    assert out[1][:2] == ("lookup", "success")
    assert offered(fake_llm.requests[2]) == {"lookup", "note"}  # after the init tool: all


def test_child_rule_and_hint(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(
        client, [{"type": "constrain_child_tools", "tool_name": "note", "children": ["lookup"]}]
    )
    fake_llm.push(call("note", text="a"), call("note", text="b"), Reply(text="done"))
    out = returns(send(client, agent_id))
    assert out[0][:2] == ("note", "success") and out[1][:2] == ("note", "error")
    assert "valid tools include: ['lookup']" in out[1][2]
    assert "Hint: Possible rules that were violated" in out[1][2]
    assert "After using note, you must use one of these tools: lookup" in out[1][2]
    assert offered(fake_llm.requests[1]) == {"lookup"}
    # the rules are told to the model in its system prompt
    assert "<tool_usage_rules>" in fake_llm.requests[0]["messages"][0]["content"]


def test_child_arg_nodes_prefill_the_child_call(client: Letta, fake_llm: FakeLLM) -> None:
    """Letta's child_arg_nodes: right after the parent, the child's prefilled arguments
    override the model's; an argument the child does not take is an error, nothing runs."""
    rule = {
        "type": "constrain_child_tools",
        "tool_name": "lookup",
        "children": ["note"],
        "child_arg_nodes": [{"name": "note", "args": {"text": "from the rule"}}],
    }
    agent_id = agent_with(client, [rule])
    got = client.agents.retrieve(agent_id).tool_rules or []
    assert got[0].model_dump(exclude_none=True)["child_arg_nodes"] == rule["child_arg_nodes"]
    fake_llm.push(
        call("lookup", key="y"),
        call("note", text="from the model"),
        call("note", text="again"),  # not right after the parent: the model's own words
        Reply(text="done"),
    )
    out = returns(send(client, agent_id))
    assert out == [
        ("lookup", "success", "yes"),
        ("note", "success", "noted from the rule"),
        ("note", "success", "noted again"),
    ]
    bad = {**rule, "child_arg_nodes": [{"name": "note", "args": {"bogus": 1}}]}
    client.agents.update(agent_id, tool_rules=[bad])  # type: ignore[list-item]
    fake_llm.push(call("lookup", key="y"), call("note", text="x"), Reply(text="done"))
    out = returns(send(client, agent_id))
    assert out[1][:2] == ("note", "error")
    assert (
        "Invalid prefilled tool arguments from tool rules" in out[1][2] and "'bogus'" in out[1][2]
    )
    stray = {**rule, "child_arg_nodes": [{"name": "lookup", "args": {"key": "y"}}]}
    with pytest.raises(UnprocessableEntityError, match="not children"):
        client.agents.update(agent_id, tool_rules=[stray])  # type: ignore[list-item]


def test_conditional_rule_maps_output_to_the_next_tool(client: Letta, fake_llm: FakeLLM) -> None:
    rule = {
        "type": "conditional",
        "tool_name": "lookup",
        "child_output_mapping": {"yes": "note"},
        "default_child": "lookup",
    }
    agent_id = agent_with(client, [rule])
    fake_llm.push(call("lookup", key="y"), call("note", text="ok"), Reply(text="done"))
    out = returns(send(client, agent_id))
    assert [o[:2] for o in out] == [("lookup", "success"), ("note", "success")]
    assert offered(fake_llm.requests[1]) == {"note"}
    fake_llm.push(call("lookup", key="n"), call("note", text="x"), Reply(text="done"))
    out = returns(send(client, agent_id))
    assert offered(fake_llm.requests[4]) == {"lookup"}  # "no" maps to nothing: the default
    assert out[1][:2] == ("note", "error")


def test_parent_rule_needs_the_parent_right_before(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(
        client, [{"type": "parent_last_tool", "tool_name": "lookup", "children": ["note"]}]
    )
    fake_llm.push(
        call("note", text="a"), call("lookup", key="y"), call("note", text="b"), Reply(text="k")
    )
    out = returns(send(client, agent_id))
    assert offered(fake_llm.requests[0]) == {"lookup"}
    assert [o[:2] for o in out] == [("note", "error"), ("lookup", "success"), ("note", "success")]


def test_max_count_per_step(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(
        client, [{"type": "max_count_per_step", "tool_name": "note", "max_count_limit": 1}]
    )
    two = Reply(
        tool_calls=[ToolCallSpec("note", {"text": "1"}), ToolCallSpec("note", {"text": "2"})]
    )
    fake_llm.push(two, Reply(text="done"))
    out = returns(send(client, agent_id))
    assert [o[:2] for o in out] == [("note", "success"), ("note", "error")]
    assert "noted 1" in out[0][2] and "Cannot call note" in out[1][2]
    assert offered(fake_llm.requests[1]) == {"lookup"}


def test_terminal_rule_ends_the_run(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(client, [{"type": "exit_loop", "tool_name": "note"}])
    fake_llm.push(call("note", text="bye"), Reply(text="never asked"))
    before = len(fake_llm.requests)
    resp = client.agents.messages.create(
        agent_id=agent_id, messages=[{"role": "user", "content": "go"}]
    )
    assert resp.stop_reason.stop_reason == "end_turn"
    assert len(fake_llm.requests) - before == 1  # no second model call
    assert returns(list(resp.messages)) == [("note", "success", "noted bye")]
    fake_llm.queue.clear()


def test_continue_rule_keeps_a_turn_ending_tool_going(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(client, [], "send_message")
    fake_llm.push(call("send_message", message="hi"), Reply(text="after"))
    before = len(fake_llm.requests)
    send(client, agent_id)
    assert len(fake_llm.requests) - before == 1  # ends_turn tool: the run ends
    fake_llm.queue.clear()
    client.agents.update(
        agent_id, tool_rules=[{"type": "continue_loop", "tool_name": "send_message"}]
    )  # type: ignore[list-item]
    fake_llm.push(call("send_message", message="hi"), Reply(text="after"))
    before = len(fake_llm.requests)
    texts = [m.content for m in send(client, agent_id) if m.message_type == "assistant_message"]
    assert len(fake_llm.requests) - before == 2 and texts == ["hi", "after"]  # send_message too


def test_required_before_exit(client: Letta, fake_llm: FakeLLM) -> None:
    agent_id = agent_with(client, [{"type": "required_before_exit", "tool_name": "note"}])
    fake_llm.push(Reply(text="bye"), call("note", text="x"), Reply(text="now bye"))
    out = send(client, agent_id)
    assert returns(out) == [("note", "success", "noted x")]
    assert "required before exit" in str(fake_llm.requests[1]["messages"][-1]["content"])
    assert [m.content for m in out if m.message_type == "assistant_message"] == ["bye", "now bye"]
