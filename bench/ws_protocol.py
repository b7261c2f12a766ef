"""The WebSocket protocol's cost per received frame, in one process with no network: our
fast-path protocol (voice_gateway/protocol/uvicorn_ws.py) against uvicorn's websockets-sansio
protocol (the baseline), in the same run.

Each protocol object is uvicorn's own, on a stand-in transport; `data_received` gets one
masked 640-byte binary frame (20 ms of 16 kHz PCM16, the voice socket's unit) at a time, the
way uvloop hands a read over, and a Starlette WebSocket endpoint reads it with
`await ws.receive()`, as the voice route does. Timed: from `data_received` to the endpoint
having the message (the event loop's turn in between included), per frame; the protocols
alternate in rounds so a busy machine weighs on both alike. System calls (the socket read,
epoll) are not in it: bench/voice_concurrency.py measures the whole server.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from _common import emit, parser, ratio, summary
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

FRAME = 640
REQUEST = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


class Transport(asyncio.Transport):
    """What uvicorn's protocols use of a transport; writes are dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8283)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def masked(payload: bytes) -> bytes:
    from websockets.frames import apply_mask

    key = os.urandom(4)
    return b"\x82\xfe" + len(payload).to_bytes(2, "big") + key + apply_mask(payload, key)


class Endpoint:
    """The app: reads frames like the voice route and notes when each arrived."""

    def __init__(self) -> None:
        self.got = 0
        self.arrived: asyncio.Event | None = None

    async def run(self, ws: WebSocket) -> None:
        await ws.accept()
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            self.got += 1
            if self.arrived is not None:
                self.arrived.set()


async def open_socket(impl: str, endpoint: Endpoint) -> Any:
    import uvicorn
    from uvicorn.server import ServerState

    from voice_gateway.protocol.uvicorn_ws import ws_protocol

    app = Starlette(routes=[WebSocketRoute("/ws", endpoint.run)])
    ws = ws_protocol(impl == "fast")
    config = uvicorn.Config(app, ws=ws, ws_per_message_deflate=False, log_config=None)
    config.load()
    proto = config.ws_protocol_class(  # type: ignore[misc]
        config=config, server_state=ServerState(), app_state={}
    )
    proto.connection_made(Transport())
    proto.data_received(REQUEST)
    for _ in range(100):  # the endpoint accepts (a frame sent before: the slow path)
        if proto.handshake_complete:
            break
        await asyncio.sleep(0)
    assert getattr(proto, "fast", False) == (impl == "fast")
    return proto


async def run(frames: int, rounds: int) -> dict[str, Any]:
    frame = masked(bytes(FRAME))
    impls = ["fast", "websockets-sansio"]
    endpoints = {impl: Endpoint() for impl in impls}
    protos = {impl: await open_socket(impl, endpoints[impl]) for impl in impls}
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    cpu: dict[str, float] = dict.fromkeys(impls, 0.0)
    perf = time.perf_counter
    for r in range(rounds + 1):  # round 0 warms up
        for impl in impls:
            proto, ep = protos[impl], endpoints[impl]
            ep.arrived = arrived = asyncio.Event()
            c0 = time.process_time()
            for _ in range(frames):
                arrived.clear()
                t0 = perf()
                proto.data_received(frame)
                await arrived.wait()
                if r:
                    times[impl].append((perf() - t0) * 1000)
            if r:
                cpu[impl] += time.process_time() - c0
    for proto in protos.values():
        proto.connection_lost(None)  # the endpoints see a disconnect and return
    await asyncio.sleep(0.01)
    out: dict[str, Any] = {}
    for impl in impls:
        out[impl] = {
            "per_frame": summary(times[impl]),
            "cpu_us_per_frame": round(cpu[impl] / (frames * rounds) * 1e6, 2),
            "frames_read": endpoints[impl].got,
        }
    base = out["websockets-sansio"]
    out["fast_vs_baseline_p50"] = ratio(
        out["fast"]["per_frame"]["p50_ms"], base["per_frame"]["p50_ms"]
    )
    out["fast_vs_baseline_cpu"] = ratio(out["fast"]["cpu_us_per_frame"], base["cpu_us_per_frame"])
    return out


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--frames", type=int, default=0, help="frames per protocol per round")
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    frames = args.frames or (2000 if args.quick else 20000)
    import uvloop

    result = uvloop.run(run(frames, args.rounds))
    from _voice import load

    emit(
        "ws_protocol",
        {"quick": args.quick, "frames_per_round": frames, "rounds": args.rounds} | result | load(),
    )


if __name__ == "__main__":
    main()
