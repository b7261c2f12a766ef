"""Admission control on a live gateway: offered far more calls than its call slots
(VG_PROCESS_MAX_CALLS) admit, it serves the admitted ones whole and refuses the rest cleanly
(close 1013 before any session event; Twilio webhook 503 for the number's Fallback URL, its
media stream 1013; a WebRTC offer 503), counts each refusal, and takes calls again once slots
are free. No call is half-served."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
import websockets

from tests.integration.test_rate_limits import MEDIA_PATH, metric, new_agent, voice_gateway
from tests.support.fake_llm import FakeLLM
from tests.support.phone import TwilioCall
from tests.support.servers import ServerThread
from tests.support.voice_client import VoiceClient

SLOTS = 3
OFFERED = 15


async def _offer(url: str) -> VoiceClient:
    """Dial and start; return once the call is either started or closed."""
    c = await VoiceClient(url).connect()
    with contextlib.suppress(websockets.ConnectionClosed):  # refused at once: closed already
        await c.start_nowait()
    for _ in range(300):
        if c.of_type("session.started") or c.close_code is not None:
            break
        await asyncio.sleep(0.02)
    return c


async def _webrtc_offer() -> str:
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("audio")
        await pc.setLocalDescription(await pc.createOffer())
        return str(pc.localDescription.sdp)
    finally:
        await pc.close()


async def _overload(srv: ServerThread) -> None:
    agent_id = new_agent(srv.url)
    url = f"{srv.ws_url}/v1/agents/{agent_id}/voice"
    calls = await asyncio.gather(*(_offer(url) for _ in range(OFFERED)))
    admitted = [c for c in calls if c.of_type("session.started")]
    refused = [c for c in calls if not c.of_type("session.started")]
    assert len(admitted) == SLOTS, [c.close_code for c in calls]
    for c in refused:  # refused cleanly: 1013 and a reason, nothing of a call before it
        assert c.close_code == 1013, (c.close_code, c.close_reason)
        assert "capacity" in c.close_reason
        assert c.events == [] and not c.audio
    # the admitted calls are served whole: a reply (text and audio) each
    for c in admitted:
        await c.send({"type": "input_text", "text": "are you there?"})
    for c in admitted:
        done = await c.wait_for("response.done", timeout=60)
        assert done["stop_reason"] == "end_turn"
        assert c.close_code is None
    await asyncio.sleep(0.5)
    assert all(len(c.audio) > 0 for c in admitted)
    # the other ways in are refused too while the slots are full
    async with httpx.AsyncClient(base_url=srv.url, timeout=30) as http:
        hook = await http.post(
            f"/v1/telephony/twilio/voice?agent_id={agent_id}",
            data={"CallSid": "CA" + "b" * 32, "From": "+15550001111"},
        )
        assert hook.status_code == 503 and hook.headers["retry-after"] == "2"
        assert '<Reject reason="busy"' in hook.text and "<Connect" not in hook.text
        rtc = await http.post(
            f"/v1/agents/{agent_id}/webrtc", json={"type": "offer", "sdp": await _webrtc_offer()}
        )
        assert rtc.status_code == 503, rtc.text
        assert "capacity" in rtc.json()["detail"] and rtc.headers["retry-after"] == "2"
    phone = TwilioCall(srv.ws_url + MEDIA_PATH, "CA" + "c" * 32, {"agent_id": agent_id})
    await phone.connect()
    with contextlib.suppress(websockets.ConnectionClosed):  # it may be closed already
        await phone.begin(line=False)
    assert await phone.wait_closed(timeout=15) == 1013
    for source, n in (("voice", OFFERED - SLOTS), ("twilio_webhook", 1), ("webrtc", 1)):
        assert metric(srv.url, "vg_calls_refused_total", reason="slots", source=source) == n
    assert metric(srv.url, "vg_calls_refused_total", reason="slots", source="phone") == 1
    # the admitted calls end; their slots come back
    for c in admitted:
        await c.close()
    for _ in range(100):
        if metric(srv.url, "vg_active_calls", source="voice") == 0:
            break
        await asyncio.sleep(0.05)
    again = await _offer(url)
    assert again.of_type("session.started"), (again.close_code, again.close_reason)
    await again.close()
    for c in refused:
        await c.close()


def test_overload_is_refused_not_shared(
    tmp_path: Path, fake_llm_server: tuple[FakeLLM, ServerThread], fake_llm: FakeLLM
) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"
    with voice_gateway(db, fake_llm_server, process_max_calls=SLOTS, admit_max_lag_ms=0) as srv:
        asyncio.run(_overload(srv))
