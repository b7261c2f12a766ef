"""Call control over the browser voice socket (typed turns: each case is about the tools, not
speech): end_call ends the call with `session.ended` once the goodbye has had time to play,
then close 1000; transfer_call asks the app (`transfer.requested`) and the call goes on; bad
calls (an unknown target, a number the model made up, end_call twice, bad DTMF digits) are
tool errors the model reads; the agent fields are checked by the REST API."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.voice_client import VoiceClient
from tests.unit.test_dtmf import decode
from voice_gateway.webrtc.client import WebRTCCaller

DESK = "+15551230000"
GOODBYE = "Thanks for calling. Goodbye!"


async def ended_record(vg: VoiceGateway, agent_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        items = vg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
        if (items and items[0].get("end_reason")) or time.monotonic() > deadline:
            assert len(items) == 1, items
            return dict(items[0])
        await asyncio.sleep(0.1)


async def started(vg: VoiceGateway, agent_id: str, text: str = "hello") -> VoiceClient:
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    await c.send({"type": "input_text", "text": text})
    return c


async def test_end_call_says_goodbye_then_ends_the_session(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk")
    vg.llm.push(Reply(text=GOODBYE, tool_calls=[ToolCallSpec("end_call", {"reason": "done"})]))
    c = await started(vg, agent_id)
    ended = await c.wait_for("session.ended", timeout=40)
    assert ended == {"type": "session.ended", "reason": "agent_ended"}
    assert await c.wait_closed() == 1000
    audio_done = c.of_type("response.audio.done")[0]
    assert audio_done["duration_ms"] > 1000
    # the goodbye had time to play (the browser reports no marks here: the audio clock)
    first_audio = c.first_at("response.audio.started")
    ended_at = c.first_at("session.ended")
    assert first_audio is not None and ended_at is not None
    assert ended_at - first_audio >= audio_done["duration_ms"] / 1000 - 0.1
    said = np.frombuffer(bytes(c.audio), dtype="<i2")
    assert len(said) / 16000 * 1000 >= audio_done["duration_ms"] - 40  # all of it was sent
    assert (await ended_record(vg, agent_id))["end_reason"] == "agent_ended"
    assert GOODBYE in [m.get("content") for m in vg.messages(agent_id)]


async def test_end_call_twice_is_a_tool_error_and_the_call_ends_once(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk")
    end = ToolCallSpec("end_call", {"reason": "done"})
    vg.llm.push(Reply(text="Bye.", tool_calls=[end, ToolCallSpec("end_call", {"reason": "x"})]))
    c = await started(vg, agent_id)
    await c.wait_for("session.ended", timeout=40)
    assert await c.wait_closed() == 1000
    results = [(e["name"], e["ok"]) for e in c.of_type("response.tool_result")]
    assert results == [("end_call", True), ("end_call", False)]
    returns = [m for m in vg.messages(agent_id) if m["message_type"] == "tool_return_message"]
    assert [r["tool_return"] for r in returns][1] == "the call is already ending"
    assert len(c.of_type("session.ended")) == 1


async def test_transfer_asks_the_app_and_the_call_goes_on(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk", transfer_targets={"front desk": DESK})
    transfer = ToolCallSpec(
        "transfer_call", {"target": "front desk", "mode": "warm", "summary": "Wants a refund."}
    )
    vg.llm.push(Reply(text="Let me get the front desk for you.", tool_calls=[transfer]))
    c = await started(vg, agent_id)
    asked = await c.wait_for("transfer.requested", timeout=40)
    assert asked == {
        "type": "transfer.requested",
        "target": "front desk",
        "mode": "warm",
        "summary": "Wants a refund.",
    }
    await c.wait_for("response.done", timeout=40)
    # after the announcement was played (the audio clock)
    first_audio = c.first_at("response.audio.started")
    asked_at = next(r.at for r in c.events if r.event["type"] == "transfer.requested")
    assert first_audio is not None and asked_at - first_audio > 1.0
    assert DESK not in str([r.event for r in c.events])  # the number stays on the server
    await c.send({"type": "input_text", "text": "still there?"})
    await c.wait_for("response.done", count=2, timeout=40)  # the call goes on
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    assert c.of_type("session.ended") == [{"type": "session.ended", "reason": "caller_ended"}]
    assert (await ended_record(vg, agent_id))["end_reason"] == "caller_ended"


async def test_unknown_targets_and_made_up_numbers_are_refused(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk", transfer_targets={"front desk": DESK})
    vg.llm.push(
        Reply(tool_calls=[ToolCallSpec("transfer_call", {"target": "billing"})]),
        Reply(tool_calls=[ToolCallSpec("transfer_call", {"target": "+15559999999"})]),
        Reply(tool_calls=[ToolCallSpec("send_dtmf", {"digits": "12a"})]),
        Reply(text="I could not do that."),
    )
    c = await started(vg, agent_id)
    await c.wait_for("response.done", timeout=40)
    results = [(e["name"], e["ok"]) for e in c.of_type("response.tool_result")]
    assert results == [("transfer_call", False), ("transfer_call", False), ("send_dtmf", False)]
    told = [m["content"] for r in vg.llm.requests[1:] for m in r["messages"][-1:]]
    assert told[0] == "unknown transfer target 'billing'; the targets are: front desk"
    assert told[1].startswith("unknown transfer target '+15559999999'")
    assert "0-9, *, #, w and W" in told[2]
    assert c.of_type("transfer.requested") == [] and c.of_type("session.ended") == []
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000


async def test_dtmf_tones_are_audio_of_the_reply(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="menu")
    vg.llm.push(Reply(tool_calls=[ToolCallSpec("send_dtmf", {"digits": "3*9"})]), Reply(text=""))
    c = await started(vg, agent_id)
    await c.wait_for("response.done", timeout=40)
    keys = decode(np.frombuffer(bytes(c.audio), dtype="<i2"), 16000)
    assert keys == "3*9"
    await c.close()


async def test_text_turns_are_never_offered_the_call_tools(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk", tools=["end_call"], transfer_targets={"front desk": DESK})
    r = vg.http.post(
        f"/v1/agents/{agent_id}/messages", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 200, r.text
    names = [t["function"]["name"] for t in vg.llm.requests[-1].get("tools") or []]
    assert not {"end_call", "transfer_call", "send_dtmf"} & set(names)


def test_agent_fields_are_checked(vg: VoiceGateway) -> None:
    r = vg.http.post(
        "/v1/agents/", json={"model": "openai/fake", "transfer_targets": {"desk": "5551230000"}}
    )
    assert r.status_code == 422 and "E.164" in str(r.json()["detail"])
    r = vg.http.post("/v1/agents/", json={"model": "openai/fake", "call_tools": ["hang_up"]})
    assert r.status_code == 422 and "unknown call tools" in str(r.json()["detail"])
    agent_id = vg.agent(name="desk", transfer_targets={"front desk": DESK})
    got = vg.http.get(f"/v1/agents/{agent_id}").json()
    assert got["transfer_targets"] == {"front desk": DESK} and got["call_tools"] is None
    patched = vg.http.patch(
        f"/v1/agents/{agent_id}",
        json={"transfer_targets": {"sales": "sip:sales@example.com"}, "call_tools": ["end_call"]},
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()
    assert body["transfer_targets"] == {"sales": "sip:sales@example.com"}
    assert body["call_tools"] == ["end_call"]
    bad = vg.http.patch(f"/v1/agents/{agent_id}", json={"transfer_targets": {"x y!": DESK}})
    assert bad.status_code == 422


async def test_webrtc_end_call_and_transfer(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="desk", transfer_targets={"front desk": DESK})
    transfer = ToolCallSpec("transfer_call", {"target": "front desk", "summary": "A refund."})
    vg.llm.push(
        Reply(text="Connecting you now.", tool_calls=[transfer]),
        Reply(text=GOODBYE, tool_calls=[ToolCallSpec("end_call", {"reason": "done"})]),
    )
    c = WebRTCCaller(vg.server.url, agent_id)
    await c.connect()
    try:
        await c.wait_for("session.started", timeout=20)
        c.send({"type": "input_text", "text": "the front desk please"})
        asked = await c.wait_for("transfer.requested", timeout=40)
        assert (asked["target"], asked["mode"], asked["summary"]) == (
            "front desk",
            "cold",
            "A refund.",
        )
        await c.wait_for("response.done", timeout=40)
        c.send({"type": "input_text", "text": "never mind, bye"})
        assert await c.wait_for("session.ended", timeout=40) == {
            "type": "session.ended",
            "reason": "agent_ended",
        }
        closed = await c.wait_for("session.closed", timeout=10)
        assert closed["code"] == 1000
        assert (await ended_record(vg, agent_id))["end_reason"] == "agent_ended"
    finally:
        await c.close()
