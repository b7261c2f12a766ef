"""STT and TTS vendors failing mid-call (OpenAI wire format on loopback): the caller hears a
short apology, gets an `error` event, and the call goes on."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.fake_openai_audio import AudioState, add_audio_routes
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient


@pytest.fixture(scope="module")
def openai_voice(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerThread, FakeLLM, AudioState]]:
    llm = FakeLLM(lambda body: Reply(text="Hello from the cloud voice."))
    state = AudioState()
    add_audio_routes(llm.app, state)
    vendor = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("pf") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt="openai",
            tts="openai",
            openai_base_url=f"{vendor.url}/v1",
            openai_api_key="test",
        ) as srv:
            yield srv, llm, state
    finally:
        vendor.stop()


def _agent(srv: ServerThread) -> str:
    import httpx

    return str(httpx.post(f"{srv.url}/v1/agents/", json={"model": "openai/fake"}).json()["id"])


async def test_openai_stt_and_tts_work(
    openai_voice: tuple[ServerThread, FakeLLM, AudioState],
) -> None:
    srv, _llm, state = openai_voice
    state.fail_speech = state.fail_transcription = False
    c = await VoiceClient(f"{srv.ws_url}/v1/agents/{_agent(srv)}/voice").connect()
    await c.start()
    await c.stream(np.concatenate([speak("What time do you open tomorrow?"), silence(800)]), 16000)
    await c.wait_for("response.done", timeout=40)
    assert "open tomorrow" in c.of_type("transcript.final")[0]["text"].lower()
    assert state.speech_requests and state.speech_requests[-1]["response_format"] == "pcm"
    assert len(c.audio) > 16000
    await c.close()


async def test_stt_failure_apologizes_and_continues(
    openai_voice: tuple[ServerThread, FakeLLM, AudioState],
) -> None:
    srv, _llm, state = openai_voice
    state.fail_transcription, state.fail_speech = True, False
    c = await VoiceClient(f"{srv.ws_url}/v1/agents/{_agent(srv)}/voice").connect()
    await c.start()
    await c.stream(np.concatenate([speak("Can you hear me now?"), silence(800)]), 16000)
    err = await c.wait_for("error", timeout=30)
    assert err["code"] == "stt_error" and not err["fatal"]
    await c.wait_for("response.audio.done", timeout=10)
    assert len(c.audio) > 8000  # the apology was spoken
    state.fail_transcription = False
    await c.send({"type": "input_text", "text": "typed instead"})
    assert (await c.wait_for("response.done", timeout=30))["stop_reason"] == "end_turn"
    await c.close()


async def test_tts_failure_apologizes_with_fallback_voice(
    openai_voice: tuple[ServerThread, FakeLLM, AudioState],
) -> None:
    srv, _llm, state = openai_voice
    state.fail_speech, state.fail_transcription = True, False
    c = await VoiceClient(f"{srv.ws_url}/v1/agents/{_agent(srv)}/voice").connect()
    await c.start()
    await c.send({"type": "input_text", "text": "say something"})
    await c.wait_for("response.done", timeout=30)
    err = c.of_type("error")[0]
    assert err["code"] == "tts_error" and not err["fatal"]
    assert len(c.audio) > 8000  # the apology, synthesized by the espeak fallback
    state.fail_speech = False
    await c.send({"type": "input_text", "text": "and again"})
    await c.wait_for("response.done", timeout=30, count=2)
    await c.close()
