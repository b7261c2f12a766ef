"""Optional pipeline settings on a live call: VG_VAD=silero (the ONNX model inside
faster-whisper, on onnxruntime) and VG_STT_PARTIALS=1 (partial whisper transcripts)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import noise_burst, silence, speak, wer
from tests.support.voice_client import VoiceClient
from voice_gateway.vad.silero import SileroVAD

LONG = (
    "I would like to book a table for four people on Saturday evening, "
    "somewhere near the river if you can find one."
)


def make_agent(srv: ServerThread) -> str:
    resp = httpx.post(f"{srv.url}/v1/agents/", json={"model": "openai/fake"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


@pytest.fixture(scope="module")
def silero_partials(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    llm = FakeLLM(lambda body: Reply(text="Sure, I can help with that."))
    llm_srv = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("opts") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            vad="silero",
            stt_partials=True,
            openai_base_url=f"{llm_srv.url}/v1",
            openai_api_key="test",
            sleeptime_model="scripted/demo",
        ) as srv:
            yield srv
    finally:
        llm_srv.stop()


async def test_silero_vad_and_partial_transcripts(silero_partials: ServerThread) -> None:
    srv = silero_partials
    assert isinstance(srv.app.state.gw.voice.new_vad(), SileroVAD)  # type: ignore[attr-defined]
    agent_id = make_agent(srv)
    c = await VoiceClient(f"{srv.ws_url}/v1/agents/{agent_id}/voice").connect()
    await c.start()
    # loud white noise: webrtcvad calls it speech (tests/unit/test_vad.py), Silero does not
    await c.stream(np.concatenate([noise_burst(600, dbfs=-20), silence(600)]), 16000)
    assert not c.of_type("speech.started")
    await c.stream(np.concatenate([speak(LONG), silence(900)]), 16000)
    done = await c.wait_for("response.done", timeout=60)
    assert done["stop_reason"] == "end_turn"
    final = c.of_type("transcript.final")[0]
    assert wer(LONG, final["text"]) <= 0.2, final["text"]
    assert len(c.of_type("speech.started")) == 1 and len(c.of_type("speech.stopped")) == 1
    partials = c.of_type("transcript.partial")
    assert len(partials) >= 2, partials  # ~every 700 ms of speech
    assert all(p["turn_id"] == final["turn_id"] for p in partials)
    # partials grow with the utterance (the first one may cut a word in half)
    assert partials[0]["text"].lower().startswith("i")
    assert any("table" in p["text"].lower() for p in partials), partials
    order = [r.event["type"] for r in c.events]
    assert order.index("transcript.partial") < order.index("transcript.final")
    await c.close()
