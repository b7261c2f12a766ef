"""A spoken call with VG_STT=deepgram and VG_TTS=deepgram: the gateway's real deepgram-sdk
talks to the loopback Deepgram (listen.v1 + speak.v1 schema), which drops the live socket in
the middle of the second utterance; the stream reconnects and the call goes on."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

pytest.importorskip("deepgram")

from tests.support.fake_deepgram import API_KEY, FakeDeepgram
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient

FIRST = "Hello, my name is Alice and I would like some green tea please."
SECOND = "What time does the library open tomorrow morning?"


def make_agent(srv: ServerThread) -> str:
    resp = httpx.post(f"{srv.url}/v1/agents/", json={"model": "openai/fake"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


@pytest.fixture(scope="module")
def deepgram_call(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerThread, FakeDeepgram, FakeLLM]]:
    fake = FakeDeepgram()
    dg = ServerThread(fake.app).start()
    llm = FakeLLM(lambda body: Reply(text="Nice to meet you. Green tea is coming right up."))
    llm_srv = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("dg") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt="deepgram",
            tts="deepgram",
            deepgram_api_key=API_KEY,
            deepgram_base_url=dg.url,
            openai_base_url=f"{llm_srv.url}/v1",
            openai_api_key="test",
            sleeptime_model="scripted/demo",
        ) as srv:
            yield srv, fake, llm
    finally:
        llm_srv.stop()
        dg.stop()


async def test_deepgram_call_survives_a_dropped_socket(
    deepgram_call: tuple[ServerThread, FakeDeepgram, FakeLLM],
) -> None:
    srv, fake, _llm = deepgram_call
    state = fake.reset()
    agent_id = make_agent(srv)
    c = await VoiceClient(f"{srv.ws_url}/v1/agents/{agent_id}/voice").connect()
    await c.start(16000, 24000)
    await c.stream(np.concatenate([silence(300), speak(FIRST), silence(900)]), 16000)
    await c.wait_for("response.done", timeout=60)
    final = c.of_type("transcript.final")[0]
    assert wer(FIRST, final["text"]) <= 0.15, final["text"]
    partials = c.of_type("transcript.partial")
    assert partials and all(p["turn_id"] == final["turn_id"] for p in partials)
    # the reply was spoken by "Aura", sentence by sentence, at the rate the client asked for
    assert "Nice to meet you." in state.spoken and "Green tea is coming right up." in state.spoken
    assert c.of_type("response.audio.started")[0]["sample_rate"] == 24000
    audio = np.frombuffer(bytes(c.audio), dtype="<i2")
    assert len(audio) / 24000 > 1.5 and rms_dbfs(audio) > -35
    assert state.listen_connections == 1

    state.drop_listen_after_ms = state.audio_ms + 1500  # mid-way through the next sentence
    await c.stream(np.concatenate([speak(SECOND), silence(900)]), 16000)
    await c.wait_for("response.done", timeout=60, count=2)
    second = c.of_type("transcript.final")[1]
    assert wer(SECOND, second["text"]) <= 0.2, second["text"]
    assert "alice" not in second["text"].lower()
    assert state.listen_connections == 2  # one reconnect, same call
    assert not c.of_type("error")
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    assert state.messages[-1] == "CloseStream"
