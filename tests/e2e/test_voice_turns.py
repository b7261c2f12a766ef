"""Turns back to back: a turn that arrives right after `response.done` must not cancel the
reply that just finished (it was fully sent; its transcript is still being stored)."""

from __future__ import annotations

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.voice_client import VoiceClient


async def test_next_turn_right_after_response_done_does_not_cancel_it(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Short answer.")
    agent_id = vg.agent()
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start()
    for i in range(5):
        await c.send({"type": "input_text", "text": f"question number {i}"})
        await c.wait_for("response.done", count=i + 1)  # and at once the next question
    await c.wait_for("turn.metrics", count=5)
    assert not c.of_type("response.cancelled") and not c.of_type("audio.clear")
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    replies = [m for m in vg.messages(agent_id) if m["message_type"] == "assistant_message"]
    assert [m["content"] for m in replies] == ["Short answer."] * 5
    assert not any(m.get("truncated") for m in replies)
