"""Every way a WebRTC call ends mid-reply ends it cleanly: DELETE on its URL, the peer closing
its connection, the client process killed, an offer whose ICE never completes. Each time the
call ends, what was said is stored, the call slot is free again (one call at most here) and no
call task, UDP socket or decoder thread is left."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import VoiceGateway, voice_gateway_stack
from tests.support.fake_llm import Reply
from tests.support.webrtc import leaks, udp_sockets, wait_until_clean
from voice_gateway.webrtc.client import WebRTCCaller

IDLE_S = 4.0
LONG = " ".join(f"Sentence {n} of a long and winding answer about the sea." for n in range(40))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VoiceGateway]:
    with voice_gateway_stack(
        tmp_path_factory.mktemp("rtc-hangup"), idle_timeout_s=IDLE_S, max_concurrent_calls=1
    ) as s:
        yield s


@pytest.fixture
def vg(stack: VoiceGateway) -> VoiceGateway:
    stack.llm.queue.clear()
    stack.llm.responder = lambda body: Reply(text=LONG, chunk_delay_s=0.02)
    return stack


async def replying(vg: VoiceGateway, agent_id: str) -> WebRTCCaller:
    c = WebRTCCaller(vg.server.url, agent_id)
    await c.connect()
    await c.wait_for("session.started", timeout=20)
    c.send({"type": "input_text", "text": "Tell me about the sea."})
    await c.wait_for("response.audio.started", timeout=20)
    await asyncio.sleep(1.0)
    return c


async def assert_ended_clean(vg: VoiceGateway, agent_id: str, udp_before: int) -> None:
    left = await wait_until_clean(vg.server, udp_before)
    assert not left.live_calls and not left.webrtc_calls, left
    assert not left.tasks and not left.threads and left.udp <= udp_before, left
    stored = vg.messages(agent_id)
    user = [m["content"] for m in stored if m["message_type"] == "user_message"]
    said = [m for m in stored if m["message_type"] == "assistant_message"]
    assert user == ["Tell me about the sea."], user
    assert said and said[0]["truncated"] is True and 0 < len(said[0]["content"]) < len(LONG)
    # the slot is free: a new call is admitted (at most one call at a time here)
    again = WebRTCCaller(vg.server.url, agent_id)
    await again.connect()
    await again.wait_for("session.started", timeout=20)
    assert (await again.hang_up()).status_code == 200
    await again.close()


async def test_delete_hangs_up(vg: VoiceGateway) -> None:
    agent_id = vg.agent()
    udp_before = udp_sockets()
    c = await replying(vg, agent_id)
    during = leaks(vg.server)  # what the checks below must see go away
    assert during.tasks and during.threads and during.udp > udp_before and during.webrtc_calls
    second = WebRTCCaller(vg.server.url, agent_id)
    with pytest.raises(RuntimeError, match="429"):  # over VG_MAX_CONCURRENT_CALLS=1
        await second.connect()
    resp = await c.hang_up()
    assert resp.status_code == 200 and resp.json()["ended"] is True
    closed = await c.wait_for("session.closed", timeout=10)
    assert closed["code"] == 1000
    assert c.of_type("response.cancelled")[0]["reason"] == "client"
    await c.close()
    await assert_ended_clean(vg, agent_id, udp_before)


async def test_peer_closing_its_connection_ends_the_call(vg: VoiceGateway) -> None:
    agent_id = vg.agent()
    udp_before = udp_sockets()
    c = await replying(vg, agent_id)
    await c.close()
    await assert_ended_clean(vg, agent_id, udp_before)


CLIENT = """
import asyncio, sys
from voice_gateway.webrtc.client import WebRTCCaller

async def main() -> None:
    c = WebRTCCaller(sys.argv[1], sys.argv[2])
    await c.connect()
    await c.wait_for("session.started", timeout=20)
    c.send({"type": "input_text", "text": "Tell me about the sea."})
    await c.wait_for("response.audio.started", timeout=20)
    print("replying", flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


async def test_killed_client_process_ends_the_call(vg: VoiceGateway) -> None:
    agent_id = vg.agent()
    udp_before = udp_sockets()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, vg.server.url, agent_id, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.strip() == b"replying", line
        await asyncio.sleep(1.0)
        proc.kill()  # SIGKILL: no DTLS close, no BYE, the media just stops
        await proc.wait()
        await assert_ended_clean(vg, agent_id, udp_before)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_offer_whose_ice_never_completes(vg: VoiceGateway) -> None:
    agent_id = vg.agent()
    udp_before = udp_sockets()
    # offer, then drop the client's peer connection before the answer is applied: the
    # candidates the gateway got lead nowhere
    from aiortc import RTCConfiguration, RTCPeerConnection

    from voice_gateway.webrtc.ice import IceConfig, pin

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio")
    pc.createDataChannel("events")
    pin(pc, IceConfig(host_addresses=("127.0.0.1",)))
    await pc.setLocalDescription(await pc.createOffer())
    offer = {"type": "offer", "sdp": pc.localDescription.sdp}
    await pc.close()
    resp = await asyncio.to_thread(vg.http.post, f"/v1/agents/{agent_id}/webrtc", json=offer)
    assert resp.status_code == 201, resp.text
    gw = vg.server.app.state.gw  # type: ignore[attr-defined]
    assert len(gw.webrtc.live) == 1
    left = await wait_until_clean(vg.server, udp_before, timeout=IDLE_S + 20)
    assert not left.webrtc_calls and not left.live_calls and not left.tasks, left
    assert not left.threads and left.udp <= udp_before, left
    assert vg.messages(agent_id) == []  # nothing was said
