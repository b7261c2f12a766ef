"""RFC 6455 through a real uvicorn server: our fast-path protocol (voice_gateway/protocol/
uvicorn_ws.py) against uvicorn's own websockets-sansio protocol, the same crafted frames sent
to each by a `websockets` client (raw bytes written to its socket where the frames are not ones
a client library would send). Both must behave the same: the same messages, close codes and
closing handshake; and the fast one must still push back on a client the app does not read."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.frames import apply_mask
from websockets.sync.client import ClientConnection, connect

from tests.support.servers import ServerThread
from voice_gateway.protocol.uvicorn_ws import (
    SEND_EXTENSION,
    SINK_EXTENSION,
    FastWebSocketProtocol,
    ws_protocol,
)

MAX_SIZE = 70_000  # the servers' ws_max_size (uvicorn's default is 16 MiB)
MAX_QUEUE = 32
BURST = [0, 1, 125, 126, 127, 65535, 65536, 100_000]  # around each payload length encoding
GATE = threading.Event()  # the /slow app reads nothing until it is set
DISCONNECTS: dict[str, int] = {}  # ?id= of a connection -> the code its app saw
SENT_NOW: dict[str, list[bool]] = {}  # ?id= -> what send_now answered, in order ("mixed")
MIXED = [b"\x00" * 640, "a", b"\x01" * 200, b"\x02" * 70_000, "b é", b"", "c"]


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Echo each message; `close:CODE` closes with CODE; /slow waits for GATE before reading,
    /late accepts after 0.3 s."""
    assert scope["type"] == "websocket"
    conn_id = scope["query_string"].decode().removeprefix("id=")
    assert (await receive())["type"] == "websocket.connect"
    if scope["path"] == "/late":
        await asyncio.sleep(0.3)
    await send({"type": "websocket.accept"})
    if scope["path"] == "/sink":
        await sink_app(scope, receive, send)
        return
    if scope["path"] == "/slow":
        while not GATE.is_set():
            await asyncio.sleep(0.01)
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            DISCONNECTS[conn_id] = msg["code"]
            return
        text = msg.get("text")
        if text is not None and text.startswith("close:"):
            await send({"type": "websocket.close", "code": int(text[6:]), "reason": "bye"})
            continue
        if text == "burst":  # messages in one go (one write on the fast path), then a close
            for n in BURST:
                await send({"type": "websocket.send", "bytes": bytes([n % 251]) * n})
            await send({"type": "websocket.send", "text": "done é"})
            await send({"type": "websocket.close", "code": 4001, "reason": "after"})
            continue
        if text == "mixed":
            await mixed(scope, send, conn_id)
            continue
        await send({"type": "websocket.send", "text": text, "bytes": msg.get("bytes")})


async def mixed(scope: dict[str, Any], send: Any, conn_id: str) -> None:
    """MIXED, every third message through the ASGI send and the rest through the send_now
    extension (where the protocol has it), then a close, then send_now once more."""
    now = (scope["extensions"].get(SEND_EXTENSION) or {}).get("send")
    answers = SENT_NOW.setdefault(conn_id, [])
    for i, m in enumerate(MIXED):
        if i % 3 and now is not None:
            answers.append(now(m))
            if answers[-1]:
                continue
        key = "text" if isinstance(m, str) else "bytes"
        await send({"type": "websocket.send", key: m})
    await send({"type": "websocket.close", "code": 4002, "reason": "mixed"})
    if now is not None:
        answers.append(now(b"after the close"))


async def sink_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The audio sink extension (what pipeline/input.py `InputPath.now` uses): binary frames
    whose first byte is even are taken by the sink, odd ones declined, and the same for text
    frames "m<n>" and the text sink; everything is logged in the order the app saw it, and
    "report" sends the log back."""
    log: list[str] = []

    def sink(data: bytes) -> bool:
        if data[0] % 2:
            return False
        log.append(f"sink:{data[0]}")
        return True

    def text_sink(text: str) -> bool:  # "m<n>" (a Twilio media message, say) with n even
        if not text.startswith("m") or int(text[1:]) % 2:
            return False
        log.append(f"tsink:{text[1:]}")
        return True

    ext = scope["extensions"].get(SINK_EXTENSION)
    if ext is not None:
        ext["set"](sink)
        ext["set_text"](text_sink)
    while True:
        msg = await receive()
        if msg["type"] == "websocket.disconnect":
            return
        if msg.get("text") == "report":
            await send({"type": "websocket.send", "text": " ".join(log)})
            continue
        data = msg.get("bytes")
        log.append(f"recv:{data[0]}" if data is not None else f"text:{msg['text']}")
        if data is not None and data[0] == 1:  # the app is busy for a while: frames queue
            await asyncio.sleep(0.05)


@pytest.fixture(scope="module", params=["fast", "websockets-sansio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    srv = ServerThread(
        echo_app,
        ws=ws_protocol(request.param == "fast"),
        lifespan="off",
        ws_ping_interval=None,
        ws_max_size=MAX_SIZE,
        ws_max_queue=MAX_QUEUE,
    ).start()
    try:
        yield srv
    finally:
        srv.stop()


def raw(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, mask: bool = True) -> bytes:
    """A frame as is, valid or not (websockets' Frame.serialize refuses invalid ones)."""
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    m = 0x80 if mask else 0
    if n < 126:
        head += bytes([m | n])
    elif n < 1 << 16:
        head += bytes([m | 126]) + struct.pack("!H", n)
    else:
        head += bytes([m | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + apply_mask(payload, key)


def client(srv: ServerThread, path: str = "/", conn_id: str = "") -> ClientConnection:
    ws = connect(f"{srv.ws_url}{path}?id={conn_id}", compression=None, max_size=None)
    ws.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return ws


def close_code(ws: ClientConnection) -> int | None:
    """The code of the server's close frame, once the connection is closed."""
    with pytest.raises(ConnectionClosed):
        while True:
            ws.recv(timeout=10)
    rcvd = ws.protocol.close_rcvd
    return rcvd.code if rcvd is not None else None


def write_in_pieces(ws: ClientConnection, data: bytes, cuts: list[int]) -> None:
    """Write `data` cut at `cuts`, pausing between pieces so each is its own TCP read."""
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        if last < cut:
            ws.socket.sendall(data[last:cut])
            time.sleep(0.002)
            last = cut


def protocols(srv: ServerThread) -> list[Any]:
    return [p for p in srv.server.server_state.connections if hasattr(p, "conn")]


def on_fast_path(srv: ServerThread, conn_id: str) -> bool:
    """Whether this connection is on the fast path (uvicorn's own protocol never is)."""
    (proto,) = [p for p in protocols(srv) if p.scope["query_string"] == f"id={conn_id}".encode()]
    return isinstance(proto, FastWebSocketProtocol) and proto.fast


def is_fast(srv: ServerThread) -> bool:
    return srv.server.config.ws_protocol_class is FastWebSocketProtocol


# ---- messages ---------------------------------------------------------------------------------


def test_frames_cut_at_every_byte(server: ServerThread) -> None:
    """Every header, mask and payload boundary falls between two reads."""
    stream = raw(2, b"\x01\x02\x03") + raw(1, b"hey") + raw(2, bytes(130)) + raw(9, b"p")
    with client(server, conn_id="cuts") as ws:
        write_in_pieces(ws, stream, list(range(1, len(stream))))
        assert ws.recv(timeout=5) == b"\x01\x02\x03"
        assert ws.recv(timeout=5) == "hey"
        assert ws.recv(timeout=5) == bytes(130)
        ws.send(b"after")
        assert ws.recv(timeout=5) == b"after"
        assert on_fast_path(server, "cuts") == is_fast(server)


message = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200),
    # around the 16/64-bit length boundary (content made, not drawn: hypothesis' size limit)
    st.integers(65_530, 65_540).map(lambda n: (bytes(range(256)) * 257)[:n]),
)


@settings(max_examples=60, deadline=None, database=None)
@given(
    messages=st.lists(st.tuples(message, st.integers(1, 4), st.booleans()), max_size=8),
    seed=st.integers(0, 2**32),
)
def test_any_messages_any_fragmentation_any_cuts(
    server: ServerThread, messages: list[tuple[str | bytes, int, bool]], seed: int
) -> None:
    """Messages in 1-4 fragments, pings between fragments, the byte stream cut at random
    places: every message comes back whole and in order, every ping gets its pong."""
    rnd = random.Random(seed)
    stream = b""
    for data, parts, ping in messages:
        payload = data.encode() if isinstance(data, str) else data
        step = -(-len(payload) // parts) or 1
        pieces = [payload[i : i + step] for i in range(0, len(payload), step)] or [b""]
        for i, piece in enumerate(pieces):
            opcode = 0 if i else (1 if isinstance(data, str) else 2)
            stream += raw(opcode, piece, fin=i == len(pieces) - 1)
            if ping and i == 0:
                stream += raw(9, b"ping")
    stream += raw(1, b"end")
    cuts = [rnd.randrange(1, len(stream)) for _ in range(rnd.randrange(0, 12))]
    with client(server) as ws:
        pong = ws.ping(b"mine")
        write_in_pieces(ws, stream, cuts)
        for data, _, _ in messages:
            assert ws.recv(timeout=10) == data
        assert ws.recv(timeout=10) == "end"
        assert pong.wait(5)


def test_ping_pong(server: ServerThread) -> None:
    with client(server) as ws:
        ws.send(b"x" * 640)
        assert ws.recv(timeout=5) == b"x" * 640
        assert ws.ping(b"payload").wait(5)
        ws.send(b"y" * 640)
        assert ws.recv(timeout=5) == b"y" * 640


# ---- errors: the same close code from both protocols ------------------------------------------

BAD_FRAMES = {
    "unmasked": (raw(2, b"abc", mask=False), 1002),
    "reserved bit": (raw(2, b"abc", rsv=4), 1002),
    "unknown opcode": (raw(3, b"abc"), 1002),
    "continuation without start": (raw(0, b"abc"), 1002),
    "new message inside a fragmented one": (raw(1, b"a", fin=False) + raw(1, b"b"), 1002),
    "control frame over 125 bytes": (raw(9, bytes(126)), 1002),
    "fragmented control frame": (raw(9, b"p", fin=False), 1002),
    "invalid UTF-8": (raw(1, b"ok \xff\xfe"), 1007),
    "invalid UTF-8 across fragments": (raw(1, b"\xe2\x82", fin=False) + raw(0, b"\x28"), 1007),
    "frame over ws_max_size": (raw(2, bytes(MAX_SIZE + 1)), 1009),
    "header of a frame over ws_max_size": (raw(2, bytes(2**20))[:14], 1009),
    "message over ws_max_size in fragments": (
        raw(2, bytes(MAX_SIZE - 10), fin=False) + raw(0, bytes(20)),
        1009,
    ),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_bad_frame_closes_with_its_code(server: ServerThread, case: str) -> None:
    frame, code = BAD_FRAMES[case]
    conn_id = f"bad-{case}-{server.port}".replace(" ", "-")
    with client(server, conn_id=conn_id) as ws:
        ws.send(b"\x00" * 640)  # the fast path is in use when the bad frame comes
        assert ws.recv(timeout=5) == b"\x00" * 640
        assert on_fast_path(server, conn_id) == is_fast(server)
        ws.socket.sendall(frame)
        assert close_code(ws) == code
    deadline = time.monotonic() + 5
    while conn_id not in DISCONNECTS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert DISCONNECTS.get(conn_id) == code  # the app heard it too


# ---- closing handshake ------------------------------------------------------------------------


@pytest.mark.parametrize("code", [1000, 4001])
def test_client_closes(server: ServerThread, code: int) -> None:
    conn_id = f"client-close-{code}-{server.port}"
    with client(server, conn_id=conn_id) as ws:
        ws.send(b"\x00" * 640)
        ws.recv(timeout=5)
        ws.close(code, "done")
    assert ws.protocol.close_rcvd is not None
    assert ws.protocol.close_rcvd.code == code  # the server echoed the close frame
    deadline = time.monotonic() + 5
    while conn_id not in DISCONNECTS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert DISCONNECTS.get(conn_id) == code


def test_server_closes(server: ServerThread) -> None:
    with client(server) as ws:
        ws.send("close:4000")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        rcvd, sent = ws.protocol.close_rcvd, ws.protocol.close_sent
        assert rcvd is not None and (rcvd.code, rcvd.reason) == (4000, "bye")
        assert sent is not None and sent.code == 4000  # the client's echo completed it


def test_a_burst_of_sends_arrives_in_order_before_the_close(server: ServerThread) -> None:
    """What the app sends in one go leaves as separate frames, in order, every payload length
    encoding, and the close the app sends after them comes after them."""
    with client(server) as ws:
        ws.send("burst")
        got = [ws.recv(timeout=5) for _ in range(len(BURST) + 1)]
        assert got == [bytes([n % 251]) * n for n in BURST] + ["done é"]
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
        rcvd = ws.protocol.close_rcvd
        assert rcvd is not None and (rcvd.code, rcvd.reason) == (4001, "after")


def test_send_now_keeps_the_order_of_the_asgi_sends(server: ServerThread) -> None:
    """Messages queued by the send_now extension (what the voice socket's reply audio and
    events use) and by the ASGI send leave in the order the app made them, each its own
    frame, before the close that follows; after the close send_now declines. uvicorn's own
    protocol has no such extension."""
    conn_id = f"mixed-{server.ws_url[-5:]}"
    with client(server, conn_id=conn_id) as ws:
        ws.send("mixed")
        got = [ws.recv(timeout=5) for _ in MIXED]
        assert got == MIXED
        assert close_code(ws) == 4002
    answers = SENT_NOW.get(conn_id, [])
    if is_fast(server):
        assert answers == [True, True, True, True, False]
    else:
        assert answers == []


def test_audio_sink_takes_frames_only_in_order(server: ServerThread) -> None:
    """The sink sees a binary frame only while the app waits with nothing queued, so the app
    sees every message in the order sent, whichever path it took: frames sent while the app
    is busy (after byte 1) queue and reach it through receive even when the sink would take
    them. uvicorn's own protocol has no sink: everything comes through receive."""
    firsts = [2, 3, 4, 1, 6, 8, 10, 5, 12]
    with client(server, "/sink") as ws:
        for b in firsts:
            ws.send(bytes([b]) * 640)
            # each its own read; 6 and 8 come while the app is busy with 1 (50 ms)
            time.sleep(0.15 if b == 8 else 0.01)
        ws.send("t")
        ws.send("report")
        log = str(ws.recv(timeout=5)).split()
    assert [int(e.split(":")[1]) for e in log if not e.startswith("text")] == firsts
    assert log[-1] == "text:t"
    took = {int(e.split(":")[1]) for e in log if e.startswith("sink:")}
    if is_fast(server):
        assert took and all(b % 2 == 0 for b in took)  # declined frames never count as taken
        assert not {6, 8} & took  # sent while the app was busy with frame 1: queued
        assert {2, 4, 10, 12} <= took
    else:
        assert not took


def test_text_sink_takes_text_frames_only_in_order(server: ServerThread) -> None:
    """The text sink (a phone call's JSON media messages, protocol/twilio.py) sees a text frame
    on the same terms: only while the app waits with nothing queued; what it declines, and
    what comes while the app is busy (after binary frame 1), reaches the app in order."""
    sent: list[str | bytes] = ["m2", "m3", "m4", bytes([1]) * 640, "m6", "m8", "m10", "m12"]
    with client(server, "/sink") as ws:
        for m in sent:
            ws.send(m)
            time.sleep(0.15 if m == "m8" else 0.01)  # m6 and m8 come while the app is busy
        ws.send("report")
        log = str(ws.recv(timeout=5)).split()
    assert [e.split(":")[1].lstrip("m") for e in log] == ["2", "3", "4", "1", "6", "8", "10", "12"]
    took = {int(e.split(":")[1]) for e in log if e.startswith("tsink:")}
    if is_fast(server):
        assert {2, 4, 10, 12} == took  # m3 declined; m6 and m8 queued behind frame 1
        assert "text:m3" in log and "text:m6" in log and "text:m8" in log
    else:
        assert not took


def test_frames_before_the_101(server: ServerThread) -> None:
    """A client that does not wait for the 101 (RFC 6455 4.1) is still served, by the
    library's path (/late accepts after 0.3 s; bytes in the request's own segment are
    dropped by uvicorn's HTTP parser, with either protocol)."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(
            b"GET /late HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        time.sleep(0.1)
        sock.sendall(raw(1, b"early"))
        sock.settimeout(5)
        got = b""
        while b"early" not in got:
            got += sock.recv(4096)
        assert got.startswith(b"HTTP/1.1 101")
        sock.sendall(raw(2, b"later"))
        while b"later" not in got:
            got += sock.recv(4096)
        (proto,) = [p for p in protocols(server) if p.scope["path"] == "/late"]
        if isinstance(proto, FastWebSocketProtocol):
            assert not proto.fast  # the library's path for this one


# ---- backpressure -----------------------------------------------------------------------------


def test_unread_messages_pause_reading(server: ServerThread) -> None:
    """An app that reads nothing: the server stops reading the socket with a bounded queue
    (the client's writes then back up in TCP); once it reads, everything arrives in order."""
    GATE.clear()
    n = 3000
    frames = b"".join(raw(2, struct.pack("!I", i) + bytes(996)) for i in range(n))
    with client(server, "/slow") as ws:
        sender = threading.Thread(target=ws.socket.sendall, args=(frames,), daemon=True)
        sender.start()
        time.sleep(1.0)
        (proto,) = [p for p in protocols(server) if p.scope["path"] == "/slow"]
        queued = len(proto.inbox.items) if hasattr(proto, "inbox") else proto.queue.qsize()
        assert proto.read_paused
        assert 0 < queued < 600  # a read's worth past the limit at most, never all 3000
        GATE.set()
        for i in range(n):
            assert ws.recv(timeout=10)[:4] == struct.pack("!I", i)
        sender.join(5)
        assert not proto.read_paused
