"""Agents that ask agents by voice (local whisper, espeak-ng, the one agent loop): the voice
agent asks a text specialist agent and waits; the `pre_exec_msg` filler is heard while the
specialist answers, and the spoken answer carries the specialist's reply."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient

SPECIALIST = "You are the billing specialist."
THINK_S = 1.5  # the specialist's model takes this long to start answering


async def test_filler_is_heard_while_the_asked_agent_answers(vg: VoiceGateway) -> None:
    specialist = vg.agent(system=SPECIALIST, include_base_tools=False)
    agent_id = vg.agent(
        include_base_tools=False, tools=["send_message_to_agent_and_wait_for_reply"]
    )

    def model(body: dict[str, Any]) -> Reply:
        if str(body["messages"][0]["content"]).startswith(SPECIALIST):
            return Reply(text="Plan B costs 12 euros a month.", ttft_s=THINK_S)
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text=f"The specialist says: {last['content']}")
        return Reply(text="Anything else?")

    vg.llm.responder = model
    args = {
        "pre_exec_msg": "Let me ask our billing specialist.",
        "message": "What does plan B cost?",
        "other_agent_id": specialist,
    }
    vg.llm.push(
        Reply(
            tool_calls=[ToolCallSpec("send_message_to_agent_and_wait_for_reply", args, fragments=6)]
        )
    )
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    speech = np.concatenate([silence(300), speak("How much is plan B"), silence(900)])
    await c.stream(speech, 16000)
    await c.wait_for("response.done", timeout=60)
    assert c.of_type("response.filler")[0]["text"] == "Let me ask our billing specialist."
    filler_at = next(r.at for r in c.events if r.event["type"] == "response.filler")
    result_at = next(r.at for r in c.events if r.event["type"] == "response.tool_result")
    assert c.of_type("response.tool_result")[0]["ok"] is True
    # the specialist's question reached it while the caller listened to the filler: filler
    # audio arrived before the specialist's reply, during the time it took to answer
    assert result_at - filler_at >= THINK_S * 0.8
    heard_before = sum(n for t, n in c.audio_frames if filler_at <= t < result_at)
    assert heard_before > 0
    said = c.of_type("response.text.done")[0]["text"]
    assert "Plan B costs 12 euros a month." in said
    # the specialist ran on its own prompt; nothing of the question is stored with it
    asked = [r for r in vg.llm.requests if str(r["messages"][0]["content"]).startswith(SPECIALIST)]
    assert len(asked) == 1 and asked[0]["messages"][-1]["content"].endswith("plan B cost?")
    stored = vg.http.get(f"/v1/agents/{specialist}/messages").json()
    assert [m["message_type"] for m in stored] == ["system_message"]
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
