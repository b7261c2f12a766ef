from __future__ import annotations

from typing import Literal

import pytest

from agents.tools import REGISTRY
from agents.tools.executor import Call
from agents.tools.registry import ToolContext, ToolRegistry, parse_docstring


def test_schema_from_signature_and_docstring() -> None:
    reg = ToolRegistry()

    @reg.register(voice_safe=True)
    async def lookup(
        ctx: ToolContext,
        city: str,
        days: int = 3,
        units: Literal["c", "f"] = "c",
        tags: list[str] | None = None,
    ) -> str:
        """Look up the weather.

        Args:
            city: The city name,
                spelled out.
            days: How many days.
            units: Temperature units.
            tags: Optional tags.
        """
        return city

    tool = reg.get("lookup")
    assert tool is not None and tool.voice_safe
    params = tool.schema()["function"]["parameters"]
    assert params["required"] == ["city"]
    assert params["properties"]["city"] == {
        "type": "string",
        "description": "The city name, spelled out.",
    }
    assert params["properties"]["days"]["type"] == "integer"
    assert params["properties"]["units"]["enum"] == ["c", "f"]
    assert params["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Optional tags.",
    }
    assert tool.schema()["function"]["description"] == "Look up the weather."
    assert "pre_exec_msg" in tool.schema(voice=True)["function"]["parameters"]["properties"]
    assert "pre_exec_msg" not in tool.schema()["function"]["parameters"]["properties"]


def test_unsupported_parameter_type_is_rejected() -> None:
    reg = ToolRegistry()
    with pytest.raises(TypeError):

        @reg.register()
        async def bad(ctx: ToolContext, thing: object) -> str:
            """Bad."""
            return ""


def test_builtins_registered_with_voice_flags() -> None:
    voice = {t.name for t in REGISTRY.all() if t.voice_safe}
    assert voice == {
        "search_memory",
        "archival_memory_search",
        "conversation_search",
        # agents that ask agents: the caller hears the filler while the other agent answers
        "send_message_to_agent_and_wait_for_reply",
        "send_message_to_agents_matching_tags",
        "send_message_to_agent_async",
        # the file tools of attached folders: read-only lookups, spoken filler while they run
        "open_files",
        "grep_files",
        "semantic_search_files",
        # call control: offered on calls only (agents/tools/call_tools.py)
        "end_call",
        "transfer_call",
        "send_dtmf",
    }
    for name in (
        "core_memory_append",
        "core_memory_replace",
        "memory_insert",
        "memory_replace",
        "memory_rethink",
        "memory_finish_edits",
        "archival_memory_insert",
    ):
        tool = REGISTRY.get(name)
        assert tool is not None and not tool.voice_safe and tool.description
    finish = REGISTRY.get("memory_finish_edits")
    assert finish is not None and finish.ends_turn


def test_docstring_parser_sections() -> None:
    summary, args = parse_docstring(
        "Do it.\n\nArgs:\n    a (int): first\n    b: second\n\nReturns:\n    str: nothing"
    )
    assert summary == "Do it." and args == {"a": "first", "b": "second"}


def test_call_finalize_strips_pre_exec_msg() -> None:
    c = Call(
        0,
        "c1",
        "search_memory",
        raw='{"pre_exec_msg": "One moment.", "convo_keyword_queries": ["dog"]}',
    )
    c.finalize()
    assert c.pre_exec_msg == "One moment." and c.arguments == '{"convo_keyword_queries": ["dog"]}'
    bad = Call(0, "c2", "x", raw='{"a": ')
    bad.finalize()
    assert bad.parse_error and "invalid JSON" in bad.parse_error
