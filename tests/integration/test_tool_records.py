"""Letta's base tools as tool records, `tool_ids` on agent create, running a tool outside a turn,
tool search, custom tools with pydantic arguments (nested models, `args_schema`), and tool
failures / oversized returns as Letta words them; letta-client 1.12.1 in strict mode against a
live gateway with the loopback OpenAI-compatible model."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from letta_client import Letta, NotFoundError
from pydantic import BaseModel, Field

from tests.integration.test_rest_letta_client import strict
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec

INVENTORY = '''
from pydantic import BaseModel, Field


class InventoryItem(BaseModel):
    """A product."""

    sku: str = Field(..., description="Stock keeping unit.")
    name: str
    price: float = Field(gt=0)


class InventoryEntry(BaseModel):
    timestamp: int
    item: InventoryItem
    transaction_id: str


def manage_inventory(data: InventoryEntry, quantity_change: int) -> bool:
    """Update the inventory catalogue with a new data entry.

    Args:
        data: The entry.
        quantity_change: Units added (negative: removed).
    """
    print(f"Updated inventory for {data.item.name} with a quantity change of {quantity_change}")
    return isinstance(data.item, InventoryItem)
'''
ENTRY = {
    "timestamp": 1640995200,
    "item": {"sku": "IPH15-001", "name": "iPhone 15", "price": 999.99},
    "transaction_id": "TXN-12345",
}


@pytest.fixture
def client(gateway_factory, db_url: str, fake_llm_url: str) -> Iterator[Letta]:  # type: ignore[no-untyped-def]
    srv = gateway_factory(
        database_url=db_url,
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        tool_return_char_limit=1000,
    )
    yield Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def test_base_tools_are_records(client: Letta) -> None:
    for name, kind in [
        ("send_message", "letta_core"),
        ("conversation_search", "letta_core"),
        ("archival_memory_insert", "letta_core"),
        ("archival_memory_search", "letta_core"),
        ("core_memory_append", "letta_memory_core"),
        ("core_memory_replace", "letta_memory_core"),
        ("memory_replace", "letta_memory_core"),
        ("memory_insert", "letta_memory_core"),
        ("memory_rethink", "letta_sleeptime_core"),
        ("memory_finish_edits", "letta_sleeptime_core"),
    ]:
        found = strict(client.tools.list(name=name))
        assert [t.name for t in found] == [name], name
        assert found[0].tool_type == kind and found[0].json_schema["name"] == name
        assert client.tools.retrieve(found[0].id).name == name
    send = strict(client.tools.list(name="send_message"))[0]
    assert send.json_schema["parameters"]["required"] == ["message"]
    # attached by id at create time (include_base_tools=False: only those), then detached
    search = strict(client.tools.list(name="conversation_search"))[0]
    agent = client.agents.create(
        model="openai/fake", include_base_tools=False, tool_ids=[send.id, search.id]
    )
    assert [t.name for t in strict(client.agents.tools.list(agent_id=agent.id))] == [
        "send_message",
        "conversation_search",
    ]
    state = client.agents.tools.detach(send.id, agent_id=agent.id)
    assert [t.name for t in state.tools] == ["conversation_search"]
    state = client.agents.tools.attach(send.id, agent_id=agent.id)
    assert {t.name for t in state.tools} == {"send_message", "conversation_search"}
    with pytest.raises(NotFoundError) as err:
        client.agents.create(model="openai/fake", tool_ids=["tool-does-not-exist"])
    assert "tool-does-not-exist" in str(err.value.body)


def test_send_message_answers_and_ends_the_turn(client: Letta, fake_llm: FakeLLM) -> None:
    send = strict(client.tools.list(name="send_message"))[0]
    agent = client.agents.create(model="openai/fake", tool_ids=[send.id])
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("send_message", {"message": "Hi there!"})]))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "hello"}]
    )
    # Letta's default: the send_message call is the assistant message it says
    assert [m.message_type for m in resp.messages] == ["assistant_message"]
    assert resp.messages[0].content == "Hi there!"
    assert resp.stop_reason.stop_reason == "end_turn" and len(fake_llm.requests) == 1
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("send_message", {"message": "Again."})]))
    resp = client.agents.messages.create(
        agent_id=agent.id,
        messages=[{"role": "user", "content": "hello"}],
        use_assistant_message=False,
    )
    kinds = [m.message_type for m in resp.messages]
    assert kinds == ["tool_call_message", "tool_return_message"]
    assert json.loads(resp.messages[0].tool_call.arguments) == {"message": "Again."}
    listed = client.agents.messages.list(agent_id=agent.id, limit=3).items  # call, its return
    assert [m.message_type for m in listed] == ["user_message", "assistant_message"]
    assert listed[1].content == "Again."


def test_run_a_tool_outside_a_turn(client: Letta) -> None:
    agent = client.agents.create(
        model="openai/fake", memory_blocks=[{"label": "human", "value": "Name: Ada"}]
    )
    res = client.agents.tools.run(
        "core_memory_append", agent_id=agent.id, args={"label": "human", "content": "Likes tea."}
    )
    assert res.status == "success"
    assert "Likes tea." in client.agents.blocks.retrieve("human", agent_id=agent.id).value
    bad = client.agents.tools.run(
        "core_memory_replace",
        agent_id=agent.id,
        args={"label": "human", "old_content": "nothing like this", "new_content": "x"},
    )
    assert bad.status == "error" and "nothing like this" in str(bad.func_return)
    tool = client.tools.create(source_code=INVENTORY)
    client.agents.tools.attach(tool.id, agent_id=agent.id)
    ok = client.agents.tools.run(
        "manage_inventory", agent_id=agent.id, args={"data": ENTRY, "quantity_change": 10}
    )
    assert ok.status == "success" and ok.func_return is True
    assert ok.stdout == ["Updated inventory for iPhone 15 with a quantity change of 10\n"]
    with pytest.raises(NotFoundError):  # a tool the agent does not have
        client.agents.tools.run("memory_rethink", agent_id=agent.id, args={})


def test_tool_search(client: Letta) -> None:
    client.tools.create(source_code=INVENTORY)
    hits = client.tools.search(query="update the inventory catalogue", search_mode="hybrid")
    assert hits[0].tool.name == "manage_inventory" and hits[0].combined_score > 0
    assert hits[0].fts_rank == 1 and hits[0].vector_rank == 1
    fts = client.tools.search(query="archival memory", search_mode="fts", limit=2)
    assert {h.tool.name for h in fts} == {"archival_memory_insert", "archival_memory_search"}
    only = client.tools.search(query="memory", tool_types=["letta_sleeptime_core"])
    assert {h.tool.tool_type for h in only} == {"letta_sleeptime_core"}
    meaning = client.tools.search(query="look up what was said earlier", search_mode="vector")
    assert "conversation_search" in [h.tool.name for h in meaning[:3]]
    # a query with no word in it (symbols only) matches nothing by text, and is no 500
    assert client.tools.search(query="\u0096 ?!", search_mode="fts") == []
    assert isinstance(client.tools.search(query="?!", search_mode="hybrid"), list)


def test_pydantic_arguments_in_a_turn(client: Letta, fake_llm: FakeLLM) -> None:
    tool = client.tools.create(source_code=INVENTORY)
    params = tool.json_schema["parameters"]
    data = params["properties"]["data"]
    assert params["required"] == ["data", "quantity_change"]
    assert data["type"] == "object" and data["required"] == ["timestamp", "item", "transaction_id"]
    item = data["properties"]["item"]
    assert item["properties"]["sku"] == {"type": "string", "description": "Stock keeping unit."}
    assert item["properties"]["price"] == {"type": "number", "exclusiveMinimum": 0}
    assert item["description"] == "A product."
    agent = client.agents.create(model="openai/fake", tool_ids=[tool.id], include_base_tools=False)
    fake_llm.push(
        Reply(
            tool_calls=[ToolCallSpec("manage_inventory", {"data": ENTRY, "quantity_change": 10})]
        ),
        Reply(text="Done."),
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "manage_inventory",
                    {
                        "data": {**ENTRY, "item": {**ENTRY["item"], "price": -5}},
                        "quantity_change": 1,
                    },
                )
            ]
        ),
        Reply(text="That failed."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Add 10 iPhones"}]
    )
    ret = resp.messages[1]
    assert ret.status == "success" and ret.tool_return == "true"
    assert ret.stdout == ["Updated inventory for iPhone 15 with a quantity change of 10\n"]
    offered = fake_llm.requests[-2]["tools"][0]["function"]["parameters"]
    assert offered["properties"]["data"]["properties"]["item"]["required"] == [
        "sku",
        "name",
        "price",
    ]
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Now a negative price"}]
    )
    ret = resp.messages[1]
    assert ret.status == "error"
    assert ret.tool_return.startswith("Error executing function manage_inventory: ValidationError")
    assert "item.price" in ret.tool_return


def test_args_schema_tool(client: Letta, fake_llm: FakeLLM) -> None:
    """Letta's `upsert_from_function(func, args_schema=Model)`: the source's parameters have no
    annotations; the schema (with $defs) comes as args_json_schema."""

    class Step(BaseModel):
        name: str = Field(..., description="Name of the step.")
        description: str = Field(..., description="What this step achieves.")

    class StepsList(BaseModel):
        steps: list[Step] = Field(..., description="Steps to add to the plan.")
        explanation: str = Field(..., description="Why these steps.")

    source = (
        "def create_task_plan(steps, explanation):\n"
        '    """Creates a task plan for the current task."""\n'
        '    print(f"Created task plan with {len(steps)} steps: {explanation}")\n'
        "    return steps\n"
    )
    tool = client.tools.upsert(
        source_code=source, args_json_schema=StepsList.model_json_schema(), tags=["planning"]
    )
    steps = tool.json_schema["parameters"]["properties"]["steps"]
    assert steps["items"]["properties"]["name"]["description"] == "Name of the step."
    assert "$defs" not in json.dumps(tool.json_schema) and "$ref" not in json.dumps(
        tool.json_schema
    )
    agent = client.agents.create(model="openai/fake", tool_ids=[tool.id], include_base_tools=False)
    plan = [{"name": "Schedule", "description": "Find a slot."}]
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("create_task_plan", {"steps": plan, "explanation": "x"})]),
        Reply(text="Planned."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Plan a meeting"}]
    )
    assert resp.messages[1].status == "success"
    assert json.loads(resp.messages[1].tool_return) == plan


def test_failures_and_oversized_returns_read_as_lettas(client: Letta, fake_llm: FakeLLM) -> None:
    failing = client.tools.create(
        source_code='def testing_method() -> int:\n    """Divide."""\n    return 5 / 0\n'
    )
    big = client.tools.create(
        source_code='def big_return() -> str:\n    """Big."""\n    return "x" * 100000\n'
    )
    agent = client.agents.create(
        model="openai/fake", tool_ids=[failing.id, big.id], include_base_tools=False
    )
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("testing_method", {})]),
        Reply(text="It failed."),
        Reply(tool_calls=[ToolCallSpec("big_return", {})]),
        Reply(text="Big."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "call testing_method"}]
    )
    ret = resp.messages[1]
    assert ret.status == "error"
    assert (
        ret.tool_return
        == "Error executing function testing_method: ZeroDivisionError: division by zero"
    )
    assert any("Traceback" in s and "ZeroDivisionError" in s for s in ret.stderr or [])
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "call big_return"}]
    )
    ret = resp.messages[1]
    assert ret.status == "success"
    assert ret.tool_return.startswith("x" * 1000 + "... [NOTE: function output was truncated ")
    assert ret.tool_return.endswith("(100000 > 1000)]")
