"""Bad input on the voice socket, each answered with a clear event or a named close code."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.speech import speak
from tests.support.voice_client import VoiceClient


async def test_oversized_binary_frame_closes_1009(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.start()
    assert c.ws is not None
    await c.ws.send(b"\x00" * (64 * 1024 + 2))
    assert await c.wait_closed() == 1009
    assert c.of_type("error")[0]["code"] == "frame_too_large"


async def test_invalid_json_and_unknown_type_are_not_fatal(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Still here.")
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.start()
    assert c.ws is not None
    await c.ws.send("{not json")
    await c.send({"type": "make.coffee"})
    await c.send({"type": "input_text"})
    await c.wait_for("error", count=3)
    codes = [e["code"] for e in c.of_type("error")]
    assert codes == ["invalid_json", "unknown_type", "invalid_event"]
    assert not any(e["fatal"] for e in c.of_type("error"))
    await c.send({"type": "input_text", "text": "are you there?"})
    done = await c.wait_for("response.done")
    assert done["stop_reason"] == "end_turn"
    await c.close()


async def test_audio_before_start_is_dropped(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    assert c.ws is not None
    for frame in (
        speak("hello there")[:16000].astype("<i2").tobytes()[i : i + 640]
        for i in range(0, 32000, 640)
    ):
        await c.ws.send(frame)
    err = await c.wait_for("error")
    assert err["code"] == "not_started" and not err["fatal"]
    await c.start()
    assert not c.of_type("speech.started")  # the early audio never reached the pipeline
    await c.close()


async def test_unsupported_audio_format_is_an_error(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.send(
        {"type": "session.start", "input_audio": {"encoding": "pcm16", "sample_rate": 96000}}
    )
    await c.send(
        {"type": "session.start", "input_audio": {"encoding": "opus", "sample_rate": 16000}}
    )
    await c.wait_for("error", count=2)
    assert [e["code"] for e in c.of_type("error")] == ["unsupported_audio_format"] * 2
    assert not c.of_type("session.started")
    await c.start(16000, 16000)  # a valid start still works
    await c.close()


async def test_unknown_agent_closes_4404(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws("agent-does-not-exist")).connect()
    assert await c.wait_closed() == 4404


async def test_bad_session_token_closes_4401(vg: VoiceGateway) -> None:
    agent_id = vg.agent()
    c = await VoiceClient(vg.ws(agent_id) + "?session_token=forged.token").connect()
    assert await c.wait_closed() == 4401
    token = vg.http.post(f"/v1/agents/{agent_id}/voice/sessions").json()
    other = vg.agent()
    c = await VoiceClient(vg.ws(other) + f"?session_token={token['session_token']}").connect()
    assert await c.wait_closed() == 4401  # a token for another agent
    ok = await VoiceClient(token["url"]).connect()
    assert (await ok.start())["agent_id"] == agent_id
    await ok.close()


CALL_CODE = ("voice_gateway/pipeline/", "voice_gateway/protocol/", "voice_gateway/routes/voice")


async def _server_tasks(vg: VoiceGateway) -> int:
    """Tasks of voice calls on the server (not the server's own, such as the outbox
    publisher, whose short-lived waits come and go)."""

    async def count() -> int:
        codes = [getattr(t.get_coro(), "cr_code", None) for t in asyncio.all_tasks()]
        return sum(1 for c in codes if c is not None and any(p in c.co_filename for p in CALL_CODE))

    return int(vg.server.call(count()))


async def test_client_vanishing_mid_reply_cancels_and_persists(vg: VoiceGateway) -> None:
    text = " ".join(f"word{i}" for i in range(400))
    vg.llm.push(Reply(text=text, chunk_delay_s=0.03))
    agent_id = vg.agent()
    before = await _server_tasks(vg)
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start()
    await c.send({"type": "input_text", "text": "talk for a long time"})
    await c.wait_for("response.text.delta", count=20)
    assert await _server_tasks(vg) > before  # the call's tasks are counted
    assert c.ws is not None
    c.ws.transport.abort()  # vanish without a close frame
    for _ in range(100):
        if vg.llm.cancelled and not vg.server.app.state.gw.calls:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.05)
    assert vg.llm.cancelled == 1  # the LLM stream was cancelled
    await asyncio.sleep(0.3)
    assert await _server_tasks(vg) <= before  # no task of the call is left
    stored = [m for m in vg.messages(agent_id) if m["message_type"] == "assistant_message"]
    assert stored and stored[0]["truncated"] is True
    produced = stored[0]["generated_content"]
    assert produced.startswith("word0 word1 word2") and len(produced) < len(text)
    assert produced.startswith(stored[0]["content"])  # stored content: what was heard


async def test_llm_failure_mid_turn_apologizes_and_continues(vg: VoiceGateway) -> None:
    vg.llm.push(Reply(fail_status=500), Reply(fail_status=500), Reply(text="Back again."))
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.start()
    await c.send({"type": "input_text", "text": "hello?"})
    done = await c.wait_for("response.done")
    assert done["stop_reason"] == "llm_api_error"
    err = c.of_type("error")[0]
    assert err["code"] == "llm_error" and not err["fatal"]
    assert len(c.audio) > 16000  # the spoken apology
    await c.send({"type": "input_text", "text": "and now?"})
    done = await c.wait_for("response.done", count=2)
    assert done["stop_reason"] == "end_turn"
    await c.close()


async def test_idle_socket_closes_1001(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.start()
    voice = vg.server.app.state.gw.voice  # type: ignore[attr-defined]
    config = voice.config
    voice.config = replace(config, idle_timeout_s=1.0)
    try:
        assert await c.wait_closed(timeout=10) == 1001
    finally:
        voice.config = config


async def test_a_call_never_started_closes_1001(vg: VoiceGateway) -> None:
    """A socket that connects and never sends session.start (silent, or only junk) does not
    hold its place forever: it is closed like an idle call."""
    voice = vg.server.app.state.gw.voice  # type: ignore[attr-defined]
    config = voice.config
    voice.config = replace(config, idle_timeout_s=1.0)
    try:
        silent = await VoiceClient(vg.ws(vg.agent())).connect()
        chatty = await VoiceClient(vg.ws(vg.agent())).connect()
        for _ in range(4):
            await chatty.send({"type": "input_text", "text": "hello?"})
            await asyncio.sleep(0.3)
        assert await silent.wait_closed(timeout=10) == 1001
        assert silent.close_reason == "no start message"
        assert await chatty.wait_closed(timeout=10) == 1001
        assert {e["code"] for e in chatty.of_type("error")} == {"not_started"}
    finally:
        voice.config = config
