"""Files by voice: a 50-page PDF and a Markdown FAQ uploaded over REST and processed by the
file-job worker; a caller asks by voice (espeak-ng speech, the local whisper) about a fact on
page 37; the agent's `semantic_search_files` call speaks its filler first, and the spoken answer
carries the fact and its page."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.integration.test_rest_folders import FAQ, manual
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient

FILLER = "Let me look that up in the manual."


def read_best_passage(body: dict[str, Any]) -> Reply:
    """The model: answers with the sentence about a code from the best passage it was given."""
    last = body["messages"][-1]
    if last["role"] != "tool":
        return Reply(text="Anything else?")
    header, _, text = last["content"].split("\n\n")[0].partition("\n")
    sentence = next((s for s in text.replace("\n", " ").split(". ") if "code" in s), text[:80])
    return Reply(text=f"According to {header.strip('[]')}: {sentence.strip().rstrip('.')}.")


def upload(vg: VoiceGateway, folder_id: str, name: str, data: bytes, kind: str) -> str:
    resp = vg.http.post(f"/v1/folders/{folder_id}/upload", files={"file": (name, data, kind)})
    assert resp.status_code == 200, resp.text
    file_id = str(resp.json()["id"])
    deadline = time.monotonic() + 300  # a poll, not a timing assertion
    while time.monotonic() < deadline:
        status = vg.http.get(f"/v1/folders/{folder_id}/files/{file_id}").json()
        if status["processing_status"] in ("completed", "error"):
            assert status["processing_status"] == "completed", status
            return file_id
        time.sleep(0.5)
    raise AssertionError(f"{name} never finished processing")


async def test_voice_question_about_page_37_of_a_pdf(vg: VoiceGateway) -> None:
    folder = vg.http.post("/v1/folders/", json={"name": "plant docs"}).json()
    upload(vg, folder["id"], "manual.pdf", manual(), "application/pdf")
    upload(vg, folder["id"], "faq.md", FAQ.encode(), "text/markdown")
    agent_id = vg.agent(name="plant helper")
    attached = vg.http.patch(f"/v1/agents/{agent_id}/folders/attach/{folder['id']}")
    assert attached.status_code == 200, attached.text

    vg.llm.responder = read_best_passage
    args = {"pre_exec_msg": FILLER, "query": "north turbine maintenance code"}
    vg.llm.push(Reply(tool_calls=[ToolCallSpec("semantic_search_files", args, fragments=6)]))
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start(16000, 16000)
    question = speak("What is the maintenance code of the north turbine")
    await c.stream(np.concatenate([silence(300), question, silence(900)]), 16000)
    await c.wait_for("response.done", timeout=90)

    # attaching opened the files; a voice prompt names them without their text
    system = vg.llm.requests[0]["messages"][0]["content"]
    assert '<file status="open" name="plant docs/faq.md">' in system
    assert "Refunds are paid" not in system
    tools = vg.llm.requests[0]["tools"]  # voice mode offered the file tool, with the filler
    [search] = [t for t in tools if t["function"]["name"] == "semantic_search_files"]
    assert "pre_exec_msg" in search["function"]["parameters"]["properties"]
    order = [r.event["type"] for r in c.events]
    assert order.index("response.filler") < order.index("response.tool_result")
    assert c.of_type("response.filler")[0]["text"] == FILLER
    tool_at = next(r.at for r in c.events if r.event["type"] == "response.tool_result")
    assert sum(n for t, n in c.audio_frames if t < tool_at) > 0  # the filler is heard first
    assert c.of_type("response.tool_result")[0]["ok"] is True
    said = c.of_type("response.text.done")[0]["text"]
    assert "KESTREL-4471" in said and "page 37" in said, said
    heard = c.of_type("transcript.final")[0]["text"].lower()
    assert "turbine" in heard or "maintenance" in heard, heard
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
