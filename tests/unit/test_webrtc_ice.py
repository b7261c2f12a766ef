"""ICE policy: VG_ICE_SERVERS and VG_WEBRTC_UDP_PORTS parsing, and pinned host candidates on
real UDP sockets (127.0.0.1, within the port range)."""

from __future__ import annotations

import re

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from tests.support.servers import free_port
from voice_gateway.settings import Settings
from voice_gateway.webrtc.ice import IceConfig, IceConfigError, parse_ice_servers, pin


def test_ice_servers_json_and_plain_urls() -> None:
    raw = '[{"urls": "turn:turn.example.org:3478", "username": "u", "credential": "p"}]'
    (turn,) = parse_ice_servers(raw)
    assert turn.urls == ["turn:turn.example.org:3478"] and turn.username == "u"
    plain = parse_ice_servers("stun:stun.example.org:3478, turn:t.example.org")
    assert [s.urls for s in plain] == [["stun:stun.example.org:3478"], ["turn:t.example.org"]]
    assert parse_ice_servers(None) == () and parse_ice_servers("  ") == ()
    cfg = IceConfig(servers=parse_ice_servers(raw))
    assert cfg.client_servers() == [
        {"urls": ["turn:turn.example.org:3478"], "username": "u", "credential": "p"}
    ]


@pytest.mark.parametrize("bad", ["[{", '[{"urls": "http://x"}]', "[1]", '[{"urls": []}]'])
def test_bad_ice_servers_are_refused(bad: str) -> None:
    with pytest.raises(IceConfigError):
        parse_ice_servers(bad)


@pytest.mark.parametrize("bad", ["x", "5000-4000", "80-90", "40000-70000"])
def test_bad_port_ranges_are_refused(bad: str) -> None:
    with pytest.raises(IceConfigError):
        IceConfig.from_settings(Settings(webrtc_udp_ports=bad))


async def test_pinned_candidates_use_the_address_and_port_range() -> None:
    low = free_port()
    low = min(max(low, 20000), 60000)
    cfg = IceConfig.from_settings(
        Settings(webrtc_host_addresses="127.0.0.1", webrtc_udp_ports=f"{low}-{low + 20}")
    )
    assert cfg.host_addresses == ("127.0.0.1",) and cfg.ports == (low, low + 20)
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("audio")
        pc.createDataChannel("events")
        pin(pc, cfg)
        await pc.setLocalDescription(await pc.createOffer())
        cands = re.findall(
            r"a=candidate:\S+ \d+ udp \d+ (\S+) (\d+) typ (\w+)", pc.localDescription.sdp
        )
        assert cands, pc.localDescription.sdp
        for host, port, kind in cands:
            assert host == "127.0.0.1" and kind == "host" and low <= int(port) <= low + 20
    finally:
        await pc.close()


async def test_unpinned_leaves_out_loopback() -> None:
    """aioice's own choice (what VG_WEBRTC_HOST_ADDRESSES fixes on a loopback-only host)."""
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        pc.addTransceiver("audio")
        pin(pc, IceConfig())
        await pc.setLocalDescription(await pc.createOffer())
        assert " 127.0.0.1 " not in pc.localDescription.sdp
    finally:
        await pc.close()
