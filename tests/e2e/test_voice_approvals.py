"""Approval by voice on espeak speech (local whisper STT, espeak-ng TTS, the one agent loop):
the agent reads the action back and sends `approval.request`; "yes, please" approves and the
tool runs once; "no" denies and it never runs; "hmm, what?" re-asks; hanging up denies. The
socket's `approval.response` answers too; a client tool runs over `tool.call` /
`tool.result`; an answer for an unknown call id is an error event and the call goes on."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from contextlib import closing
from typing import Any

import numpy as np

from agents.approvals import NOT_RUN
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient

BOOK = '''
def book_table(people: int) -> str:
    """Book a table at the restaurant.

    Args:
        people: How many people.
    """
    return f"table booked for {people}"
'''
QUESTION = "Shall I book a table for 4 people?"


def booking_agent(vg: VoiceGateway) -> str:
    resp = vg.http.put("/v1/tools/", json={"source_code": BOOK, "voice_safe": True})
    assert resp.status_code in (200, 201), resp.text
    rule = {
        "type": "requires_approval",
        "tool_name": "book_table",
        "prompt_template": "Shall I book a table for {{ people }} people?",
    }
    return vg.agent(include_base_tools=False, tools=["book_table"], tool_rules=[rule])


def runs_of_tool(vg: VoiceGateway, agent_id: str) -> list[dict[str, Any]]:
    return [
        m
        for m in vg.messages(agent_id)
        if m["message_type"] == "tool_return_message" and m["name"] == "book_table"
    ]


def stored_turns(vg: VoiceGateway, agent_id: str) -> list[dict[str, Any]]:
    """The agent's finished turns as stored for the transcript bus (the outbox table)."""
    url = vg.server.settings.database_url  # type: ignore[attr-defined]
    with closing(sqlite3.connect(url.split("///", 1)[1])) as db:
        rows = db.execute("SELECT payload FROM outbox WHERE agent_id = ? ORDER BY id", (agent_id,))
        return [json.loads(p) for (p,) in rows]


async def say(c: VoiceClient, text: str) -> None:
    await c.stream(np.concatenate([silence(300), speak(text), silence(900)]), 16000)


async def ask_for_booking(vg: VoiceGateway, agent_id: str) -> VoiceClient:
    vg.llm.push(Reply(tool_calls=[ToolCallSpec("book_table", {"people": 4})]))
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    await say(c, "Please book a table for four people")
    req = await c.wait_for("approval.request", timeout=40)
    assert req["name"] == "book_table" and req["prompt"] == QUESTION
    done = await c.wait_for("response.done", timeout=40)
    assert done["stop_reason"] == "requires_approval"
    said = "".join(e["text"] for e in c.of_type("response.text.delta"))
    assert QUESTION in said  # the read-back is spoken (and shown)
    assert QUESTION in c.of_type("response.text.done")[-1]["text"]  # and in the reply's text
    assert not c.of_type("response.tool_result")  # nothing ran
    return c


async def test_yes_please_approves_and_the_tool_runs_once(vg: VoiceGateway) -> None:
    agent_id = booking_agent(vg)
    c = await ask_for_booking(vg, agent_id)
    vg.llm.push(Reply(text="Your table for four is booked."))
    await say(c, "Yes, please.")
    await c.wait_for("response.done", count=2, timeout=40)
    results = c.of_type("response.tool_result")
    assert [(r["name"], r["ok"]) for r in results] == [("book_table", True)]
    assert "is booked" in "".join(e["text"] for e in c.of_type("response.text.delta"))
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    runs = runs_of_tool(vg, agent_id)
    assert [(m["status"], m["tool_return"]) for m in runs] == [("success", "table booked for 4")]
    # the read-back is in the stored transcript of its turn (what sleeptime reads)
    asked, answered = [t for t in stored_turns(vg, agent_id) if not t["call_ended"]]
    assert answered["user_text"].lower().startswith("yes")
    assert QUESTION in asked["agent_text"] and QUESTION in asked["agent_text_heard"]
    # ... but not in the stored assistant message (the model did not say it)
    assert not any(QUESTION in str(m.get("content")) for m in vg.messages(agent_id))


async def test_no_denies_and_it_never_runs(vg: VoiceGateway) -> None:
    agent_id = booking_agent(vg)
    c = await ask_for_booking(vg, agent_id)
    vg.llm.push(Reply(text="Alright, I will not book it."))
    await say(c, "No.")
    await c.wait_for("response.done", count=2, timeout=40)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    runs = runs_of_tool(vg, agent_id)
    assert [m["status"] for m in runs] == ["error"]
    assert runs[0]["tool_return"].endswith("User reason: the caller said no")


async def test_hmm_what_re_asks_then_yes(vg: VoiceGateway) -> None:
    agent_id = booking_agent(vg)
    c = await ask_for_booking(vg, agent_id)
    asked = len(vg.llm.requests)
    audio_items = len(c.of_type("response.audio.started"))
    await say(c, "Hmm, what?")
    await c.wait_for("response.audio.started", count=audio_items + 1, timeout=40)
    assert len(vg.llm.requests) == asked  # re-asked by the pipeline: no model call, no run
    assert len(c.of_type("response.done")) == 1
    vg.llm.push(Reply(text="Booked."))
    await say(c, "Yes.")
    await c.wait_for("response.done", count=2, timeout=40)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    assert [m["status"] for m in runs_of_tool(vg, agent_id)] == ["success"]


async def test_hanging_up_denies(vg: VoiceGateway) -> None:
    agent_id = booking_agent(vg)
    c = await ask_for_booking(vg, agent_id)
    await c.close()
    deadline = time.monotonic() + 20
    while not runs_of_tool(vg, agent_id) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    runs = runs_of_tool(vg, agent_id)
    assert [m["status"] for m in runs] == ["error"]
    assert "call ended before the caller answered" in runs[0]["tool_return"]


NOTE = '''
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    return "noted " + text
'''


async def test_hanging_up_on_a_mixed_step_runs_nothing_of_it(vg: VoiceGateway) -> None:
    """A step with a call that waits for approval and one that needs none: the free call is
    announced (response.tool_call) but waits with the other; a hang-up refuses both (no model
    step would follow to see a result, so nothing of the step runs)."""
    resp = vg.http.put("/v1/tools/", json={"source_code": NOTE, "voice_safe": True})
    assert resp.status_code in (200, 201), resp.text
    booking_agent(vg)  # registers book_table
    rule = {"type": "requires_approval", "tool_name": "book_table"}
    agent_id = vg.agent(include_base_tools=False, tools=["book_table", "note"], tool_rules=[rule])
    calls = [ToolCallSpec("note", {"text": "booking"}), ToolCallSpec("book_table", {"people": 4})]
    vg.llm.push(Reply(tool_calls=calls))
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    await c.send({"type": "input_text", "text": "Book a table for four and note it"})
    await c.wait_for("approval.request", timeout=40)
    await c.wait_for("response.done", timeout=40)
    assert [e["name"] for e in c.of_type("response.tool_call")] == ["note"]
    assert not c.of_type("response.tool_result")  # nothing ran yet
    await c.close()
    deadline = time.monotonic() + 20
    while len(rets := tool_returns(vg, agent_id)) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert rets["book_table"][0] == "error"
    assert rets["note"] == ("error", NOT_RUN)


def tool_returns(vg: VoiceGateway, agent_id: str) -> dict[str, tuple[str, str]]:
    return {
        m["name"]: (m["status"], m["tool_return"])
        for m in vg.messages(agent_id)
        if m["message_type"] == "tool_return_message"
    }


async def test_socket_approval_response_and_unknown_call_id(vg: VoiceGateway) -> None:
    agent_id = booking_agent(vg)
    c = await ask_for_booking(vg, agent_id)
    call_id = c.of_type("approval.request")[0]["call_id"]
    await c.send({"type": "approval.response", "call_id": "call-nope", "approve": True})
    err = await c.wait_for("error", timeout=10)
    assert err["code"] == "unknown_call" and not err["fatal"]
    vg.llm.push(Reply(text="Done."))
    await c.send({"type": "approval.response", "call_id": call_id, "approve": True})
    await c.wait_for("response.done", count=2, timeout=40)
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    assert [m["status"] for m in runs_of_tool(vg, agent_id)] == ["success"]


async def test_client_tool_over_the_voice_socket(vg: VoiceGateway) -> None:
    agent_id = vg.agent(include_base_tools=False)
    c = await VoiceClient(vg.ws(agent_id)).connect()
    tool = {
        "name": "show_map",
        "description": "Show a map on the caller's screen.",
        "parameters": {"type": "object", "properties": {"place": {"type": "string"}}},
    }
    await c.send(
        {
            "type": "session.start",
            "input_audio": {"encoding": "pcm16", "sample_rate": 16000},
            "output_audio": {"encoding": "pcm16", "sample_rate": 16000},
            "client_tools": [tool],
        }
    )
    await c.wait_for("session.started")
    vg.llm.push(Reply(tool_calls=[ToolCallSpec("show_map", {"place": "Paris"})]))
    await c.send({"type": "input_text", "text": "Where is Paris?"})
    call = await c.wait_for("tool.call", timeout=30)
    assert call["name"] == "show_map" and '"Paris"' in call["arguments"]
    await c.send({"type": "tool.result", "call_id": "call-unknown", "result": "x"})
    err = await c.wait_for("error", timeout=10)
    assert err["code"] == "unknown_call"
    vg.llm.push(Reply(text="The map is on your screen."))
    await c.send({"type": "tool.result", "call_id": call["call_id"], "result": "map shown"})
    await c.wait_for("response.done", count=2, timeout=30)
    last = vg.llm.requests[-1]["messages"][-1]
    assert last["role"] == "tool" and last["content"] == "map shown"
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
