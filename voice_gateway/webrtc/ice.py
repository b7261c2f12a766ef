"""ICE policy of the gateway's peer connections: which STUN/TURN servers (none by default: a
gateway must not contact a public STUN server unless told to), which local addresses the host
candidates use, and which UDP ports they bind.

aioice 0.13 has neither an address nor a port setting (it takes every interface address but
127.0.0.1, on ephemeral ports), so `pin` gives each ICE connection of one peer connection a
subclass that binds the configured addresses within the configured port range. Without
`VG_WEBRTC_HOST_ADDRESSES` the addresses are aioice's own choice."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from dataclasses import dataclass
from typing import Any

from aioice import Candidate
from aioice import ice as aioice_ice
from aiortc import RTCIceServer, RTCPeerConnection

from voice_gateway.settings import Settings


class IceConfigError(ValueError):
    """A WebRTC setting that cannot be used (raised at start-up)."""


@dataclass(frozen=True, slots=True)
class IceConfig:
    servers: tuple[RTCIceServer, ...] = ()
    host_addresses: tuple[str, ...] = ()  # empty: every interface address (aioice's choice)
    ports: tuple[int, int] | None = None  # inclusive UDP port range; None: ephemeral

    @classmethod
    def from_settings(cls, s: Settings) -> IceConfig:
        return cls(
            parse_ice_servers(s.ice_servers),
            tuple(a.strip() for a in (s.webrtc_host_addresses or "").split(",") if a.strip()),
            parse_port_range(s.webrtc_udp_ports),
        )

    def client_servers(self) -> list[dict[str, Any]]:
        """The servers as browsers take them (`RTCConfiguration.iceServers`)."""
        out: list[dict[str, Any]] = []
        for s in self.servers:
            entry: dict[str, Any] = {"urls": s.urls}
            if s.username is not None:
                entry["username"] = s.username
            if s.credential is not None:
                entry["credential"] = s.credential
            out.append(entry)
        return out


def parse_ice_servers(raw: str | None) -> tuple[RTCIceServer, ...]:
    """VG_ICE_SERVERS: a JSON list of `{"urls", "username", "credential"}` (the browser's
    RTCIceServer shape), or comma-separated `stun:` / `turn:` URLs without credentials."""
    if not raw or not raw.strip():
        return ()
    raw = raw.strip()
    if not raw.startswith("["):
        items: list[Any] = [{"urls": u.strip()} for u in raw.split(",") if u.strip()]
    else:
        try:
            items = json.loads(raw)
        except ValueError as exc:
            raise IceConfigError(f"VG_ICE_SERVERS is not valid JSON: {exc}") from exc
    servers = []
    for item in items:
        urls = item.get("urls") if isinstance(item, dict) else None
        url_list = [urls] if isinstance(urls, str) else urls
        if not url_list or not all(
            isinstance(u, str) and u.split(":", 1)[0] in ("stun", "stuns", "turn", "turns")
            for u in url_list
        ):
            raise IceConfigError(f"VG_ICE_SERVERS: bad entry {item!r}: urls must be stun:/turn:")
        user, credential = item.get("username"), item.get("credential")
        servers.append(RTCIceServer(urls=url_list, username=user, credential=credential))
    return tuple(servers)


def parse_port_range(raw: str | None) -> tuple[int, int] | None:
    """VG_WEBRTC_UDP_PORTS: "LOW-HIGH" (inclusive), e.g. "40000-40999"."""
    if not raw or not raw.strip():
        return None
    low, sep, high = raw.strip().partition("-")
    try:
        lo, hi = int(low), int(high if sep else low)
    except ValueError as exc:
        raise IceConfigError(f"VG_WEBRTC_UDP_PORTS must be LOW-HIGH, got {raw!r}") from exc
    if not 1024 <= lo <= hi <= 65535:
        raise IceConfigError(f"VG_WEBRTC_UDP_PORTS {raw!r}: need 1024 <= LOW <= HIGH <= 65535")
    return lo, hi


def bind_udp(address: str, ports: tuple[int, int] | None) -> socket.socket:
    """A UDP socket bound to `address`, on a free port of `ports` (random start) or any."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    candidates = [0]
    if ports is not None:
        lo, hi = ports
        start = random.randint(lo, hi)
        candidates = [*range(start, hi + 1), *range(lo, start)]
    for port in candidates:
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((address, port))
        except OSError:
            sock.close()
            continue
        sock.setblocking(False)
        return sock
    raise OSError(f"no free UDP port on {address} in {ports[0]}-{ports[1]}")  # type: ignore[index]


class PinnedConnection(aioice_ice.Connection):
    """An aioice connection whose host candidates use `vg_config`'s addresses and ports."""

    vg_config: IceConfig

    async def get_component_candidates(
        self,
        component: int,
        addresses: list[str],
        timeout: int = 5,  # noqa: ASYNC109 (aioice's signature)
    ) -> list[Candidate]:
        cfg = self.vg_config
        if cfg.ports is None and not cfg.host_addresses:
            return await super().get_component_candidates(component, addresses, timeout)
        loop = asyncio.get_running_loop()
        protocols = []
        for address in cfg.host_addresses or addresses:
            try:
                sock = bind_udp(address, cfg.ports)
            except OSError:
                continue
            _, protocol = await loop.create_datagram_endpoint(
                lambda: aioice_ice.StunProtocol(self), sock=sock
            )
            host, port = sock.getsockname()[:2]
            protocol.local_candidate = Candidate(
                foundation=aioice_ice.candidate_foundation("host", "udp", host),
                component=component,
                transport="udp",
                priority=aioice_ice.candidate_priority(component, "host"),
                host=host,
                port=port,
                type="host",
            )
            protocols.append(protocol)
        self._protocols += protocols
        found = [p.local_candidate for p in protocols]
        if self.stun_server:  # server-reflexive candidates of the pinned sockets (IPv4)
            stun = self.stun_server
            tasks = [
                asyncio.create_task(aioice_ice.server_reflexive_candidate(p, stun))
                for p in protocols
                if ":" not in p.local_candidate.host
            ]
            if tasks:
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                for task in pending:
                    task.cancel()
                found += [t.result()[0] for t in done if t.exception() is None]
        # a relayed candidate: aioice's own code (it opens no host socket with no addresses)
        saved, self.stun_server = self.stun_server, None
        try:
            found += await super().get_component_candidates(component, [], timeout)
        finally:
            self.stun_server = saved
        return found


def pin(pc: RTCPeerConnection, config: IceConfig) -> None:
    """Call after setRemoteDescription and before setLocalDescription (which gathers)."""
    transports = {t.sender.transport for t in pc.getTransceivers()}
    if pc.sctp is not None:
        transports.add(pc.sctp.transport)
    for dtls in transports:
        conn = dtls.transport.iceGatherer._connection
        if not isinstance(conn, PinnedConnection):
            conn.__class__ = PinnedConnection  # same layout: only the methods change
            conn.vg_config = config  # type: ignore[attr-defined]
