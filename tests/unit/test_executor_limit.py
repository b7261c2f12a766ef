"""The executor cuts a tool's return at the tool's own `return_char_limit` (MCP tools carry
theirs from the tool record), with Letta's note; a tool without one is left whole."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agents.tools.executor import Call, execute
from agents.tools.registry import Tool, ToolContext

PARAMS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}


async def _long(ctx: ToolContext, **kwargs: Any) -> str:
    return "z" * 5000


def run(limit: int | None) -> tuple[bool, str]:
    tool = Tool(name="long", fn=_long, description="", parameters=PARAMS, return_char_limit=limit)
    call = Call(index=0, id="c1", name="long", raw="{}")
    call.finalize()
    return asyncio.run(execute(call, tool, cast(ToolContext, None), timeout_s=10))


def test_cut_at_the_tools_limit_with_lettas_note() -> None:
    ok, text = run(120)
    assert ok
    assert text == (
        "z" * 120 + "... [NOTE: function output was truncated since it exceeded the character "
        "limit (5000 > 120)]"
    )


def test_no_limit_or_a_short_return_is_whole() -> None:
    assert run(None) == (True, "z" * 5000)
    assert run(5000) == (True, "z" * 5000)
