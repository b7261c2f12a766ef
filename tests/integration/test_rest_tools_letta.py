"""Custom tools as Letta clients manage them (strict letta-client 1.12.1, raw HTTP): an upsert
of an existing name updates it and keeps its tags unless new ones are given; a json_schema
naming another function than the source's is a 400 as Letta answers; the same tool rule twice
is stored once; and the voice-safe rule by tool type: custom tools are offered in voice unless
`voice_safe: false` takes one out, core-memory editing never."""

from __future__ import annotations

import httpx
import pytest
from letta_client import BadRequestError, Letta

from tests.support.servers import ServerThread

DOUBLE = (
    'def double(x: int) -> int:\n    """Twice x.\n\n    Args:\n        x: a number\n    """\n'
    "    return 2 * x\n"
)
TRIPLE = DOUBLE.replace("def double", "def triple").replace("2 * x", "3 * x")


@pytest.fixture
def srv(gateway_factory, sqlite_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(database_url=sqlite_url)  # type: ignore[no-any-return]


@pytest.fixture
def client(srv: ServerThread) -> Letta:
    return Letta(base_url=srv.url, api_key="k", timeout=60, _strict_response_validation=True)


def test_upsert_keeps_tags_and_schema_name_must_match(client: Letta, srv: ServerThread) -> None:
    made = client.tools.upsert(source_code=DOUBLE, tags=["math", "planning"])
    again = client.tools.upsert(source_code=DOUBLE, description="Two times x.")
    assert again.id == made.id and again.description == "Two times x."
    assert again.tags == ["math", "planning"]  # not given: kept
    retagged = client.tools.upsert(source_code=DOUBLE, tags=["arith"])
    assert retagged.id == made.id and retagged.tags == ["arith"]
    schema = {"name": "other_name", "description": "x", "parameters": {"type": "object"}}
    with pytest.raises(BadRequestError) as err:
        client.tools.update(made.id, source_code=TRIPLE, json_schema=schema)
    assert "other_name" in str(err.value)
    assert client.tools.retrieve(made.id).name == "double"  # unchanged
    r = httpx.post(f"{srv.url}/v1/tools/", json={"source_code": DOUBLE, "json_schema": schema})
    assert r.status_code == 400 and "other_name" in r.json()["detail"]
    r = httpx.put(f"{srv.url}/v1/tools/", json={"source_code": 5})
    assert r.status_code == 422 and "detail" in r.json()


def test_duplicate_tool_rules_are_one(client: Letta) -> None:
    rule = {"type": "exit_loop", "tool_name": "send_message"}
    agent = client.agents.create(model="openai/fake", tool_rules=[rule, rule, rule])  # type: ignore[list-item]
    assert len(client.agents.retrieve(agent.id).tool_rules or []) == 1
    updated = client.agents.update(agent.id, tool_rules=[rule, rule])  # type: ignore[list-item]
    assert len(updated.tool_rules or []) == 1


def test_voice_safe_by_tool_type(client: Letta) -> None:
    tools = {t.name: t for t in client.tools.list()}
    for name in ("search_memory", "archival_memory_search", "conversation_search", "grep_files"):
        assert tools[name].metadata["voice_safe"] is True, name  # type: ignore[index]
    for name in ("core_memory_append", "core_memory_replace", "memory_rethink"):
        assert tools[name].metadata["voice_safe"] is False, name  # type: ignore[index]
    custom = client.tools.create(source_code=DOUBLE)
    assert custom.metadata["voice_safe"] is True  # type: ignore[index]
    out = client.tools.update(custom.id, extra_body={"voice_safe": False})
    assert out.metadata["voice_safe"] is False  # type: ignore[index]
    kept = client.tools.upsert(source_code=DOUBLE)  # an update without the flag keeps it
    assert kept.metadata["voice_safe"] is False  # type: ignore[index]
