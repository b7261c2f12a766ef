"""WebRTC signalling refuses what it cannot use, each with a status and a JSON `detail`, on a
gateway that requires a key (VG_API_KEY): bad SDP, no audio, no Opus, unknown agent, bad and
other-agent tokens, a second offer on a live call, a caller the token does not name."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender

from tests.e2e.conftest import VoiceGateway, voice_gateway_stack
from tests.support.fake_llm import Reply
from voice_gateway.webrtc.client import WebRTCCaller
from voice_gateway.webrtc.ice import IceConfig, pin

KEY = "admin-key-for-webrtc-tests"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VoiceGateway]:
    with voice_gateway_stack(tmp_path_factory.mktemp("rtc-keyed"), api_key=KEY) as stack:
        stack.http.headers.update(AUTH)
        yield stack


async def make_offer(*, audio: bool = True, codecs: tuple[str, ...] = ("audio/opus",)) -> str:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        if audio:
            t = pc.addTransceiver("audio")
            caps = RTCRtpSender.getCapabilities("audio").codecs
            t.setCodecPreferences([c for c in caps if c.mimeType.lower() in codecs])
        pc.createDataChannel("events")
        pin(pc, IceConfig(host_addresses=("127.0.0.1",)))
        await pc.setLocalDescription(await pc.createOffer())
        return str(pc.localDescription.sdp)
    finally:
        await pc.close()


def post(vg: VoiceGateway, agent_id: str, sdp: str, **kw: object) -> httpx.Response:
    body = kw.pop("json", {"type": "offer", "sdp": sdp})
    return vg.http.post(f"/v1/agents/{agent_id}/webrtc", json=body, **kw)  # type: ignore[arg-type]


def detail(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    return str(resp.json()["detail"])


async def test_malformed_offers_are_400(keyed: VoiceGateway) -> None:
    agent_id = keyed.agent()
    good = await make_offer()
    assert "malformed SDP" in detail(post(keyed, agent_id, "hello there"), 400)
    assert "no m-line" in detail(post(keyed, agent_id, "v=0\r\ns=-\r\n"), 400)
    no_fp = "".join(line for line in good.splitlines(True) if "fingerprint" not in line)
    assert "fingerprint" in detail(post(keyed, agent_id, no_fp), 400)
    no_ice = re.sub(r"a=ice-(ufrag|pwd):.*\r\n", "", good)
    assert "ICE" in detail(post(keyed, agent_id, no_ice), 400)
    assert "type must be 'offer'" in detail(
        post(keyed, agent_id, good, json={"type": "answer", "sdp": good}), 400
    )
    assert "JSON" in detail(
        keyed.http.post(
            f"/v1/agents/{agent_id}/webrtc",
            content=b"{oops",
            headers={"content-type": "application/json"},
        ),
        400,
    )
    assert "application/sdp" in detail(
        keyed.http.post(
            f"/v1/agents/{agent_id}/webrtc", content=good, headers={"content-type": "text/plain"}
        ),
        415,
    )


async def test_no_audio_or_no_opus_is_400(keyed: VoiceGateway) -> None:
    agent_id = keyed.agent()
    assert "no audio m-line" in detail(post(keyed, agent_id, await make_offer(audio=False)), 400)
    pcmu = await make_offer(codecs=("audio/pcmu",))
    assert "opus/48000" not in pcmu
    assert "Opus" in detail(post(keyed, agent_id, pcmu), 400)


async def test_credentials_as_on_the_voice_socket(keyed: VoiceGateway) -> None:
    agent_id, other = keyed.agent(), keyed.agent()
    offer = await make_offer()
    assert "agent not found" in detail(post(keyed, "agent-unknown", offer), 404)
    url = f"{keyed.server.url}/v1/agents/{agent_id}/webrtc"
    body = {"type": "offer", "sdp": offer}
    async with httpx.AsyncClient(timeout=30) as anon:
        assert "API key" in detail(await anon.post(url, json=body), 401)
        bad = {"Authorization": "Bearer not-the-key"}
        assert "invalid API key" in detail(await anon.post(url, json=body, headers=bad), 401)
        forged = {"session_token": "eyJhIjoiYSJ9.forged"}
        resp = await anon.post(url, json=body, params=forged)
        assert "invalid session token" in detail(resp, 401)
        token = keyed.http.post(f"/v1/agents/{other}/voice/sessions").json()["session_token"]
        wrong = {"session_token": token}
        assert "another agent" in detail(await anon.post(url, json=body, params=wrong), 401)
        whip_wrong = {"Authorization": f"Bearer {token}", "content-type": "application/sdp"}
        resp = await anon.post(url, content=offer, headers=whip_wrong)
        assert "another agent" in detail(resp, 401)
    # another user's key: the agent is not theirs to see (404, as on REST)
    gw = keyed.server.app.state.gw  # type: ignore[attr-defined]
    _, bob_key = keyed.server.call(gw.memory.users.create("bob"))
    resp = post(keyed, agent_id, offer, headers={"Authorization": f"Bearer {bob_key}"})
    detail(resp, 404)


async def test_whip_offer_second_offer_and_delete(keyed: VoiceGateway) -> None:
    agent_id = keyed.agent()
    token = keyed.http.post(f"/v1/agents/{agent_id}/voice/sessions").json()["session_token"]
    offer = await make_offer()
    async with httpx.AsyncClient(base_url=keyed.server.url, timeout=30) as page:
        headers = {"Authorization": f"Bearer {token}", "content-type": "application/sdp"}
        resp = await page.post(f"/v1/agents/{agent_id}/webrtc", content=offer, headers=headers)
        assert resp.status_code == 201, resp.text
        assert resp.headers["content-type"].startswith("application/sdp")
        assert resp.text.startswith("v=0") and "a=setup:active" in resp.text
        location = resp.headers["location"]
        assert location.startswith(f"/v1/agents/{agent_id}/webrtc/rtc-")
        again = await page.post(location, content=offer, headers=headers)
        assert "renegotiation" in detail(again, 409)
        ended = (await page.delete(location)).json()
        assert ended == {"call_id": location.rsplit("/", 1)[1], "ended": True}
        assert "no such live call" in detail(await page.delete(location), 404)
        assert "no such live call" in detail(await page.post(location, content=offer), 404)


async def test_token_caller_is_bound(keyed: VoiceGateway) -> None:
    keyed.llm.responder = lambda body: Reply(text="Hi.")
    agent_id = keyed.agent()
    minted = keyed.http.post(f"/v1/agents/{agent_id}/voice/sessions", json={"caller": "u-1"})
    token = minted.json()["session_token"]
    c = WebRTCCaller(keyed.server.url, agent_id, session_token=token)
    await c.connect({"type": "session.start", "caller": "u-2"})
    err = await c.wait_for("error", timeout=20)
    assert err["code"] == "caller_mismatch" and err["fatal"] is True
    assert (await c.wait_for("session.closed"))["code"] == 4401
    await c.close()
    ok = WebRTCCaller(keyed.server.url, agent_id, session_token=token)
    await ok.connect({"type": "session.start"})
    conv = (await ok.wait_for("session.started", timeout=20))["conversation_id"]
    await ok.close()
    listed = keyed.http.get("/v1/conversations/", params={"agent_id": agent_id}).json()
    identity_id = next(c["identity_id"] for c in listed if c["id"] == conv)
    identity = keyed.http.get(f"/v1/identities/{identity_id}").json()
    assert identity["identifier_key"] == "u-1", identity
