"""Tool rules in voice calls: the same loop enforces them on a voice socket's turns (typed
turns here, so each case is about the rules, not speech): init, child, conditional, parent,
max count per step, terminal, continue, required before exit (approval: test_voice_approvals.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.voice_client import VoiceClient

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


def call(name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, args)])


TWO_NOTES = Reply(
    tool_calls=[ToolCallSpec("note", {"text": "1"}), ToolCallSpec("note", {"text": "2"})]
)
CASES = {
    "run_first": (
        {"type": "run_first", "tool_name": "lookup"},
        [call("note", text="a"), call("lookup", key="y"), Reply(text="done")],
        [("note", False), ("lookup", True)],
    ),
    "constrain_child_tools": (
        {"type": "constrain_child_tools", "tool_name": "note", "children": ["lookup"]},
        [call("note", text="a"), call("note", text="b"), Reply(text="done")],
        [("note", True), ("note", False)],
    ),
    "conditional": (
        {"type": "conditional", "tool_name": "lookup", "child_output_mapping": {"yes": "lookup"}},
        [call("lookup", key="y"), call("note", text="x"), Reply(text="done")],
        [("lookup", True), ("note", False)],
    ),
    "parent_last_tool": (
        {"type": "parent_last_tool", "tool_name": "lookup", "children": ["note"]},
        [call("note", text="a"), call("lookup", key="y"), call("note", text="b"), Reply(text="k")],
        [("note", False), ("lookup", True), ("note", True)],
    ),
    "max_count_per_step": (
        {"type": "max_count_per_step", "tool_name": "note", "max_count_limit": 1},
        [TWO_NOTES, Reply(text="done")],
        [("note", True), ("note", False)],
    ),
    "exit_loop": (
        {"type": "exit_loop", "tool_name": "note"},
        [call("note", text="bye"), Reply(text="never asked")],
        [("note", True)],
    ),
    "continue_loop": (
        {"type": "continue_loop", "tool_name": "note"},
        [call("note", text="x"), Reply(text="Noted, and going on.")],
        [("note", True)],
    ),
    "required_before_exit": (
        {"type": "required_before_exit", "tool_name": "note"},
        [Reply(text="bye"), call("note", text="x"), Reply(text="now bye")],
        [("note", True)],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_rule_in_a_voice_call(vg: VoiceGateway, case: str) -> None:
    for source in (LOOKUP, NOTE):
        r = vg.http.put("/v1/tools/", json={"source_code": source, "voice_safe": True})
        assert r.status_code in (200, 201), r.text
    rule, script, expected = CASES[case]
    agent_id = vg.agent(include_base_tools=False, tools=["lookup", "note"], tool_rules=[rule])
    vg.llm.push(*script)
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    await c.send({"type": "input_text", "text": "go"})
    await c.wait_for("response.done", timeout=40)
    got = [(e["name"], e["ok"]) for e in c.of_type("response.tool_result")]
    assert got == expected
    if case == "exit_loop":
        assert len(vg.llm.requests) == 1 and len(vg.llm.queue) == 1  # no second model call
    if case == "continue_loop":  # told to the model, and the turn goes on after the tool
        prompt = vg.llm.requests[0]["messages"][0]["content"]
        assert "note requires continuing your response when called" in prompt
        assert len(vg.llm.requests) == 2
        assert "going on" in c.of_type("response.text.done")[0]["text"]
    if case == "required_before_exit":
        assert "now bye" in c.of_type("response.text.done")[0]["text"]
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
