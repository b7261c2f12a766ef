"""Spoken turns over native WebRTC on loopback: a real aiortc peer (Opus, DTLS-SRTP, SCTP data
channel) against the gateway's real pipeline (local whisper, espeak-ng, the loopback LLM)."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.speech import rms_dbfs, silence, speak, wer
from tests.support.voice_client import VoiceClient
from tests.support.webrtc import udp_sockets, wait_until_clean
from voice_gateway.webrtc.client import REPLY_RATE, WebRTCCaller

UTTERANCE = "Hello, my name is Alice and I would like some green tea please."
ANSWER = "Nice to meet you, Alice. Green tea is coming right up."
LONG_REPLY = " ".join(f"Here is sentence number {n} of a rather long answer." for n in range(20))


def caller(vg: VoiceGateway, agent_id: str) -> WebRTCCaller:
    return WebRTCCaller(vg.server.url, agent_id)


async def test_spoken_turn_over_webrtc(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text=ANSWER)
    agent_id = vg.agent()
    udp_before = udp_sockets()
    c = caller(vg, agent_id)
    await c.connect()
    assert c.answer["type"] == "answer" and c.answer["ice_servers"] == []  # no STUN by default
    assert "a=candidate:" in c.answer["sdp"] and " 127.0.0.1 " in c.answer["sdp"]
    started = await c.wait_for("session.started", timeout=20)
    assert started["agent_id"] == agent_id
    c.play(np.concatenate([silence(300), speak(UTTERANCE), silence(900)]), 16000)
    done = await c.wait_for("response.done", timeout=40)
    assert done["stop_reason"] == "end_turn"
    final = c.of_type("transcript.final")[0]
    assert wer(UTTERANCE, final["text"]) <= 0.15, final["text"]
    metrics = await c.wait_for("turn.metrics")
    for key in ("endpointing_ms", "stt_ms", "llm_ttft_ms", "tts_ttfb_ms", "voice_to_voice_ms"):
        assert isinstance(metrics[key], float) and metrics[key] >= 0, (key, metrics)
    audio_done = c.of_type("response.audio.done")[0]
    await asyncio.sleep(audio_done["duration_ms"] / 1000 + 0.5)  # let the paced audio arrive
    audio = np.frombuffer(bytes(c.audio), dtype="<i2")
    loud = [a for a in np.array_split(audio, max(1, len(audio) // 320)) if rms_dbfs(a) > -40]
    assert len(loud) * 320 / REPLY_RATE > 1.5, "reply audio is (nearly) silent"
    assert rms_dbfs(np.concatenate(loud)) > -35
    c.send({"type": "session.end"})
    closed = await c.wait_for("session.closed", timeout=20)
    assert closed["code"] == 1000
    await c.close()
    stored = vg.messages(agent_id)
    kinds = [(m["message_type"], m.get("content")) for m in stored]
    assert ("user_message", final["text"]) in kinds and ("assistant_message", ANSWER) in kinds
    left = await wait_until_clean(vg.server, udp_before)
    assert not left.tasks and not left.threads and left.udp <= udp_before, left


async def test_barge_in_drops_reply_audio_at_once(vg: VoiceGateway) -> None:
    vg.llm.push(Reply(text=LONG_REPLY))
    vg.llm.responder = lambda body: Reply(text="Okay, I will stop.")
    agent_id = vg.agent()
    c = caller(vg, agent_id)
    await c.connect()
    await c.wait_for("session.started", timeout=20)
    c.send({"type": "input_text", "text": "Tell me a long story."})
    await c.wait_for("response.audio.started", timeout=20)
    await asyncio.sleep(2.0)
    c.play(np.concatenate([speak("Stop, stop, that's enough."), silence(700)]), 16000)
    cancelled = await c.wait_for("response.cancelled", timeout=20)
    assert cancelled["reason"] == "barge_in"
    clear_at = c.first_at("audio.clear")
    assert clear_at is not None
    await c.wait_for("response.done", timeout=30)
    # the reply's audio stopped at the clear: nothing loud from 0.25 s to 0.8 s after it
    # (before the short second reply can start)
    late = [rms for t, rms in c.audio_frames if clear_at + 0.25 < t < clear_at + 0.8]
    assert late and max(late) < 100, max(late)
    await c.close()
    first = next(m for m in vg.messages(agent_id) if m["message_type"] == "assistant_message")
    assert first["truncated"] is True and len(first["content"]) < len(LONG_REPLY) / 2


async def test_bad_json_on_the_data_channel_is_an_error_event(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Still here.")
    agent_id = vg.agent()
    c = caller(vg, agent_id)
    await c.connect()
    await c.wait_for("session.started", timeout=20)
    c.send("{not json")
    c.send({"type": "nonsense"})
    c.send({"type": "session.start"})
    bad = await c.wait_for("error", timeout=10)
    assert bad["code"] == "invalid_json" and bad["fatal"] is False
    assert (await c.wait_for("error", count=2))["code"] == "unknown_type"
    assert (await c.wait_for("error", count=3))["code"] == "already_started"
    c.send({"type": "input_text", "text": "Are you there?"})  # the call goes on
    assert (await c.wait_for("response.done", timeout=30))["stop_reason"] == "end_turn"
    assert "Still here." in "".join(e["text"] for e in c.of_type("response.text.delta"))
    resp = await c.hang_up()
    assert resp.status_code == 200 and resp.json()["ended"] is True
    await c.close()


def _shape(types: list[str]) -> list[str]:
    """An event sequence without what timing decides: text deltas (their number and where the
    audio start falls among them) and memory updates (sleeptime after an earlier call)."""
    out: list[str] = []
    for t in types:
        if t not in ("response.text.delta", "memory.updated") and (not out or out[-1] != t):
            out.append(t)
    return out


async def test_same_event_sequence_as_the_voice_socket(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text=ANSWER)
    audio = np.concatenate([silence(300), speak(UTTERANCE), silence(900)])
    agent_id = vg.agent()
    ws = await VoiceClient(vg.ws(agent_id)).connect()
    await ws.start()
    await ws.stream(audio, 16000)
    await ws.wait_for("turn.metrics", timeout=40)
    await ws.close()
    rtc = caller(vg, agent_id)
    await rtc.connect()
    await rtc.wait_for("session.started", timeout=20)
    await rtc.play_and_wait(audio, 16000)
    await rtc.wait_for("turn.metrics", timeout=40)
    await rtc.close()
    ws_types = _shape([r.event["type"] for r in ws.events])
    rtc_types = _shape([e.event["type"] for e in rtc.events])
    assert rtc_types == ws_types, (rtc_types, ws_types)
