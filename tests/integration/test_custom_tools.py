"""Custom tools through the official letta-client SDK against a live gateway: created from
Python source (schema read by ast), upserted, listed, changed, deleted, attached to agents, and
run in the sandbox during a turn of the one agent loop (loopback fake OpenAI server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from letta_client import (
    ConflictError,
    Letta,
    NotFoundError,
    PermissionDeniedError,
    UnprocessableEntityError,
)

from memory.service import Memory
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.servers import ServerThread

FORECAST = '''
from typing import Literal, Optional

def _round(x):
    return round(x, 1)

def forecast(
    city: str,
    days: int = 3,
    units: Literal["c", "f"] = "c",
    hours: list[int] | None = None,
    detail: Optional[dict] = None,
    *,
    gusts: bool = False,
    scale: float = 1.0,
) -> dict:
    """Forecast the weather for a city.

    Args:
        city: The city name,
            spelled out.
        days: How many days ahead.
        units: Temperature units.
        hours: Hours of the day to report.
        detail: Extra options.
        gusts: Whether to include wind gusts.
        scale: A multiplier.
    """
    print(f"looking up {city}")
    return {"city": city, "days": days, "temps": [_round(20.04 * scale)] * days}
'''


@pytest.fixture
def srv(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test"
    )


@pytest.fixture
def client(srv: ServerThread) -> Iterator[Letta]:
    yield Letta(base_url=srv.url, api_key="any-key-on-loopback", timeout=60)


def custom_names(client: Letta) -> set[str]:
    return {t.name for t in client.tools.list() if t.tool_type == "custom"}


def test_create_from_source_gives_the_schema(client: Letta) -> None:
    tool = client.tools.create(source_code=FORECAST, tags=["weather"])
    assert tool.name == "forecast" and tool.tool_type == "custom"
    assert tool.id.startswith("tool-") and tool.source_code == FORECAST
    # voice-safe unless taken out (Letta's voice agent offers custom tools)
    assert tool.tags == ["weather"] and tool.metadata == {"voice_safe": True, "builtin": False}
    schema = tool.json_schema
    assert schema is not None
    assert schema["name"] == "forecast"
    assert schema["description"] == "Forecast the weather for a city."
    params = schema["parameters"]
    assert params["type"] == "object" and params["required"] == ["city"]
    assert params["properties"] == {
        "city": {"type": "string", "description": "The city name, spelled out."},
        "days": {"type": "integer", "description": "How many days ahead."},
        "units": {"type": "string", "enum": ["c", "f"], "description": "Temperature units."},
        "hours": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "Hours of the day to report.",
        },
        "detail": {"type": "object", "description": "Extra options."},
        "gusts": {"type": "boolean", "description": "Whether to include wind gusts."},
        "scale": {"type": "number", "description": "A multiplier."},
    }
    again = client.tools.retrieve(tool.id)
    assert again.json_schema == schema and again.name == "forecast"
    assert [t.id for t in client.tools.list(name="forecast")] == [tool.id]
    assert "forecast" in custom_names(client)
    with pytest.raises(ConflictError):  # create never replaces
        client.tools.create(source_code=FORECAST)
    # a caller's json_schema overrides the generated one
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    given = {"name": "forecast", "description": "Custom.", "parameters": params}
    over = client.tools.upsert(source_code=FORECAST, json_schema=given)
    assert over.id == tool.id and over.json_schema == given and over.description == "Custom."


def test_upsert_modify_delete_and_agents_follow(client: Letta) -> None:
    src = 'def shout(text: str) -> str:\n    """Upper-case text."""\n    return text.upper()\n'
    made = client.tools.upsert(source_code=src)
    assert made.name == "shout" and made.json_schema["description"] == "Upper-case text."
    same = client.tools.upsert(source_code=src.replace("Upper-case", "Capitalise"))
    assert same.id == made.id and same.description == "Capitalise text."
    agent = client.agents.create(model="scripted/demo")
    state = client.agents.tools.attach(made.id, agent_id=agent.id)
    assert "shout" in {t.name for t in state.tools}
    changed = client.tools.update(made.id, tags=["text"], metadata={"voice_safe": False})
    assert changed.tags == ["text"] and changed.metadata["voice_safe"] is False
    renamed = client.tools.update(made.id, source_code=src.replace("def shout", "def yell"))
    assert renamed.name == "yell" and renamed.json_schema["name"] == "yell"
    assert renamed.metadata["voice_safe"] is False  # kept
    names = {t.name for t in client.agents.tools.list(agent_id=agent.id)}
    assert "yell" in names and "shout" not in names  # the agent follows the rename
    client.tools.delete(made.id)
    with pytest.raises(NotFoundError):
        client.tools.retrieve(made.id)
    assert "yell" not in custom_names(client)
    assert "yell" not in {t.name for t in client.agents.retrieve(agent_id=agent.id).tools}
    builtin = next(t for t in client.tools.list() if t.name == "core_memory_append")
    with pytest.raises(PermissionDeniedError):
        client.tools.delete(builtin.id)
    assert client.tools.retrieve(builtin.id).name == "core_memory_append"


def test_custom_tool_runs_in_a_turn(client: Letta, fake_llm: FakeLLM) -> None:
    tool = client.tools.create(source_code=FORECAST)
    agent = client.agents.create(model="openai/fake", include_base_tools=False)
    assert [t.name for t in client.agents.tools.attach(tool.id, agent_id=agent.id).tools] == [
        "forecast"
    ]
    args = {"city": "Lima", "days": 2}
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("forecast", args)]), Reply(text="Mild."))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "Weather in Lima?"}]
    )
    assert [m.message_type for m in resp.messages] == [
        "tool_call_message", "tool_return_message", "assistant_message"]  # fmt: skip
    ret = resp.messages[1]
    assert ret.status == "success" and ret.name == "forecast"
    assert json.loads(ret.tool_return) == {"city": "Lima", "days": 2, "temps": [20.0, 20.0]}
    assert ret.stdout == ["looking up Lima\n"] and ret.stderr == []
    first, second = fake_llm.requests[-2:]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert list(offered) == ["forecast"]
    assert offered["forecast"]["parameters"]["required"] == ["city"]
    sent = json.loads(next(m for m in second["messages"] if m["role"] == "tool")["content"])
    assert sent["func_return"]["temps"] == [20.0, 20.0] and sent["stdout"] == ["looking up Lima\n"]
    stored = [
        m
        for m in client.agents.messages.list(agent_id=agent.id, order="asc")
        if m.message_type == "tool_return_message"
    ]
    assert stored[-1].stdout == ["looking up Lima\n"] and stored[-1].tool_return == ret.tool_return
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("forecast", {"city": "Quito"})]), Reply(text="Ok"))
    chunks = list(
        client.agents.messages.stream(
            agent_id=agent.id, messages=[{"role": "user", "content": "Quito?"}], stream_tokens=True
        )
    )
    streamed = next(c for c in chunks if c.message_type == "tool_return_message")
    assert streamed.stdout == ["looking up Quito\n"] and "Quito" in streamed.tool_return
    state = client.agents.tools.detach(tool.id, agent_id=agent.id)
    assert state.tools == []
    client.agents.messages.create(agent_id=agent.id, messages=[{"role": "user", "content": "x"}])
    assert "tools" not in fake_llm.requests[-1] or not fake_llm.requests[-1]["tools"]


def test_voice_mode_offers_only_voice_safe_custom_tools(
    srv: ServerThread, client: Letta, fake_llm: FakeLLM
) -> None:
    safe = 'def clock(zone: str) -> str:\n    """Time in a zone."""\n    return "noon"\n'
    unsafe = 'def wipe(target: str) -> str:\n    """Wipe something."""\n    return "done"\n'
    t1 = client.tools.create(source_code=safe)  # voice-safe by default
    t2 = client.tools.create(source_code=unsafe, extra_body={"voice_safe": False})
    assert t1.metadata["voice_safe"] is True and t2.metadata["voice_safe"] is False
    agent = client.agents.create(model="openai/fake")
    for t in (t1, t2):
        client.agents.tools.attach(t.id, agent_id=agent.id)

    def offered(voice: bool) -> dict[str, Any]:
        fake_llm.push(Reply(text="Sure."))
        body = {"model": agent.id, "messages": [{"role": "user", "content": "hi"}], "voice": voice}
        r = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        return {t["function"]["name"]: t["function"] for t in fake_llm.requests[-1]["tools"]}

    voice = offered(True)
    assert "clock" in voice and "wipe" not in voice
    assert "pre_exec_msg" in voice["clock"]["parameters"]["properties"]
    assert next(iter(voice)) == "search_memory"
    text = offered(False)
    assert {"clock", "wipe"} <= set(text)
    assert "pre_exec_msg" not in text["clock"]["parameters"]["properties"]


BAD_SOURCES = [
    ("def f(x: int) -> int\n    return x\n", "syntax error at line 1"),
    ("x = 1\n", "no top-level function"),
    ("import numpy\ndef f(a: numpy.ndarray) -> int:\n    return 1\n", "unsupported annotation"),
    ("def f(a) -> int:\n    return 1\n", "parameter 'a' of 'f' has no type annotation"),
    ("async def f(a: int) -> int:\n    return a\n", "async def"),
    ("def f(*items: int) -> int:\n    return 1\n", "*args"),
    ("def core_memory_append(a: str) -> str:\n    return a\n", "built-in tool"),
    ("def f(a: Literal[1, 'x']) -> int:\n    return 1\n", "Literal"),
]


@pytest.mark.parametrize(("source", "why"), BAD_SOURCES)
def test_bad_source_is_refused_and_nothing_stored(client: Letta, source: str, why: str) -> None:
    before = custom_names(client)
    with pytest.raises(UnprocessableEntityError) as err:
        client.tools.create(source_code=source)
    assert why in str(err.value.body["detail"])  # type: ignore[index]
    with pytest.raises(UnprocessableEntityError):
        client.tools.upsert(source_code=source)
    assert custom_names(client) == before


def make_user(db_url: str, name: str) -> str:
    async def main() -> str:
        memory = await Memory.open(db_url)
        try:
            return (await memory.users.create(name))[1]
        finally:
            await memory.close()

    return asyncio.run(main())


def test_other_users_tools_are_not_found(gateway_factory, db_url: str) -> None:  # type: ignore[no-untyped-def]
    key_a, key_b = make_user(db_url, "alice"), make_user(db_url, "bob")
    srv = gateway_factory(database_url=db_url, api_key="server-secret")
    alice, bob = Letta(base_url=srv.url, api_key=key_a), Letta(base_url=srv.url, api_key=key_b)
    admin = Letta(base_url=srv.url, api_key="server-secret")
    src = 'def secret_sauce(x: str) -> str:\n    """Alice only."""\n    return x\n'
    mine = alice.tools.create(source_code=src)
    bobs_agent = bob.agents.create(model="scripted/demo")
    assert "secret_sauce" not in custom_names(bob)
    for call in (
        lambda: bob.tools.retrieve(mine.id),
        lambda: bob.tools.update(mine.id, description="hacked"),
        lambda: bob.tools.delete(mine.id),
        lambda: bob.agents.tools.attach(mine.id, agent_id=bobs_agent.id),
        lambda: admin.agents.tools.attach(mine.id, agent_id=bobs_agent.id),  # not bob's to run
    ):
        with pytest.raises(NotFoundError):
            call()
    assert alice.tools.retrieve(mine.id).description == "Alice only."
    assert bob.tools.create(source_code=src).id != mine.id  # names are per user
    shared = admin.tools.create(source_code=src.replace("secret_sauce", "house_tool"))
    assert "house_tool" in custom_names(bob)  # the server's tools are everyone's
    bob.agents.tools.attach(shared.id, agent_id=bobs_agent.id)
    with pytest.raises(PermissionDeniedError):
        bob.tools.update(shared.id, description="mine now")
