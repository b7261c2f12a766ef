"""What a WebRTC call may leave behind, counted in this process (the test gateway runs in a
thread of it): call tasks on the server's loop, UDP sockets, aiortc's decoder threads."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from tests.support.servers import ServerThread

CALL_CODE = (
    "voice_gateway/pipeline/",
    "voice_gateway/webrtc/",
    "voice_gateway/routes/",
    "/aiortc/",
    "/aioice/",
)


def server_call_tasks(server: ServerThread) -> list[str]:
    """Tasks on the server's loop running call code (ours or aiortc's/aioice's)."""

    async def names() -> list[str]:
        out = []
        for t in asyncio.all_tasks():
            code = getattr(t.get_coro(), "cr_code", None)
            if code is not None and any(p in code.co_filename for p in CALL_CODE):
                out.append(code.co_qualname)
        return out

    return list(server.call(names()))


def udp_sockets() -> int:
    """UDP sockets this process holds (ICE host candidates are UDP sockets)."""
    inodes = set()
    for name in ("udp", "udp6"):
        with open(f"/proc/net/{name}") as f:
            inodes |= {line.split()[9] for line in list(f)[1:]}
    mine = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            mine += 1
    return mine


def rtc_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith("-decoder")]


@dataclass
class Leaks:
    tasks: list[str]
    udp: int
    threads: list[str]
    live_calls: int
    webrtc_calls: int


def leaks(server: ServerThread) -> Leaks:
    gw: Any = server.app.state.gw  # type: ignore[attr-defined]
    return Leaks(
        server_call_tasks(server),
        udp_sockets(),
        rtc_threads(),
        len(gw.calls),
        len(gw.webrtc.live),
    )


async def wait_until_clean(server: ServerThread, udp_before: int, timeout: float = 30.0) -> Leaks:
    """Poll until no call task, call, decoder thread or extra UDP socket is left (or the
    timeout); returns the last count for the test to assert on."""
    deadline = time.monotonic() + timeout
    while True:
        now = leaks(server)
        clean = not (now.tasks or now.threads or now.live_calls or now.webrtc_calls)
        if (clean and now.udp <= udp_before) or time.monotonic() > deadline:
            return now
        await asyncio.sleep(0.2)
