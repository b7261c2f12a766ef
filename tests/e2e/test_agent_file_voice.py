"""An agent imported from a Letta 0.16 agent file talks by voice: a spoken question in its
default conversation reaches the model after the imported history (tool call and tool return
included), and the reply is spoken."""

from __future__ import annotations

import json

import numpy as np

from memory.ids import default_conversation_id
from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.letta_export import letta_file
from tests.support.speech import rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient

QUESTION = "How do I prefer to be contacted?"


async def test_imported_agent_answers_by_voice_with_its_history(vg: VoiceGateway) -> None:
    resp = vg.http.post(
        "/v1/agents/import", files={"file": ("ada.af", json.dumps(letta_file()).encode())}
    )
    assert resp.status_code == 200, resp.text
    (agent_id,) = resp.json()["agent_ids"]
    vg.llm.push(Reply(text="You prefer email, Ada."))
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(conversation_id=default_conversation_id(agent_id))
    await c.stream(np.concatenate([silence(300), speak(QUESTION), silence(900)]), 16000)
    done = await c.wait_for("response.done", timeout=60)
    assert done["stop_reason"] == "end_turn"
    deltas = "".join(e["text"] for e in c.of_type("response.text.delta"))
    assert deltas == "You prefer email, Ada."
    audio = np.frombuffer(bytes(c.audio), dtype="<i2")
    assert len(audio) / 16000 > 1.0 and rms_dbfs(audio) > -35
    await c.send({"type": "session.end"})
    await c.wait_closed()
    sent = vg.llm.requests[0]["messages"]
    assert wer(QUESTION, sent[-1]["content"]) <= 0.2, sent[-1]
    history = [(m["role"], m.get("content"), m.get("tool_call_id")) for m in sent[1:-1]]
    assert history == [
        ("user", "Hi, I'm Ada. Where is my order 1042?", None),
        ("assistant", None, None),
        ("tool", "Order 1042: shipped on Monday", "call_lookup1"),
        ("assistant", "Your order 1042 shipped on Monday.", None),
        ("user", "Thanks! Remember that I prefer email.", None),
        ("assistant", None, None),
        ("tool", "None", "call_mem2"),
        ("assistant", "Noted: email it is.", None),
    ]
    assert "Name: Ada. Customer since 2021." in sent[0]["content"]
