"""A voice call with an agent on `anthropic/...`: espeak-ng speech in real time, local whisper,
the real `anthropic` SDK against the loopback Messages API server (streamed text and a streamed
tool_use whose pre_exec_msg is spoken first), espeak TTS back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.fake_anthropic import API_KEY, FakeAnthropic
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from tests.support.speech import rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient

UTTERANCE = "Please remember that my favourite tea is jasmine."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeAnthropic, str, str]]:
    claude = FakeAnthropic()
    llm = ServerThread(claude.app).start()
    db: Path = tmp_path_factory.mktemp("anthropic-voice") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            anthropic_api_key=API_KEY,
            anthropic_base_url=llm.url,
            sleeptime_model="scripted/demo",  # call-end rewriting must not take queued replies
        ) as srv:
            resp = httpx.post(
                f"{srv.url}/v1/agents/",
                json={"model": "anthropic/claude-sonnet-4-6", "name": "claude-voice"},
                timeout=30,
            )
            assert resp.status_code == 201, resp.text
            yield claude, srv.ws_url, str(resp.json()["id"])
    finally:
        llm.stop()


async def test_spoken_turn_with_a_tool_on_anthropic(stack: tuple[FakeAnthropic, str, str]) -> None:
    claude, ws_url, agent_id = stack
    claude.push(
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "archival_memory_search",
                    {"pre_exec_msg": "One moment, checking my notes.", "query": "tea"},
                    fragments=5,
                )
            ]
        ),
        Reply(text="Jasmine tea it is. I will remember that."),
    )
    c = await VoiceClient(f"{ws_url}/v1/agents/{agent_id}/voice").connect()
    await c.start()
    await c.stream(np.concatenate([silence(300), speak(UTTERANCE), silence(900)]), 16000)
    done = await c.wait_for("response.done", timeout=60)
    assert done["stop_reason"] == "end_turn"
    final = c.of_type("transcript.final")[0]
    assert wer(UTTERANCE, final["text"]) <= 0.2, final["text"]
    order = [r.event["type"] for r in c.events]
    assert order.index("response.filler") < order.index("response.tool_result")
    assert c.of_type("response.filler")[0]["text"] == "One moment, checking my notes."
    deltas = "".join(e["text"] for e in c.of_type("response.text.delta"))
    assert deltas == "Jasmine tea it is. I will remember that."
    audio = np.frombuffer(bytes(c.audio), dtype="<i2")
    assert len(audio) / 16000 > 1.5 and rms_dbfs(audio) > -35
    # what Anthropic was sent: the spoken words as the user turn, the voice tools with their
    # pre_exec_msg argument, then the tool_result answering the streamed tool_use
    first, second = claude.requests[-2:]
    assert wer(UTTERANCE, first["messages"][-1]["content"][0]["text"]) <= 0.2
    search = next(t for t in first["tools"] if t["name"] == "archival_memory_search")
    assert "pre_exec_msg" in search["input_schema"]["properties"]
    use = second["messages"][-2]["content"][-1]
    assert use["type"] == "tool_use" and use["name"] == "archival_memory_search"
    assert second["messages"][-1]["content"][0]["tool_use_id"] == use["id"]
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
