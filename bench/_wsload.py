"""A light load-generating client of the browser voice socket, for bench/voice_concurrency.py.

Each call is a real RFC 6455 client over its own loopback TCP connection: an HTTP/1.1 Upgrade
handshake whose Sec-WebSocket-Accept is checked, masked client frames (a fresh random key per
frame), and a parser that reads every server frame (unmasked, FIN/continuation, text, binary,
ping, close) and answers the closing handshake. What makes it cheap is what it leaves out:
no per-call task or coroutine per frame. One timer per process writes each call's next 20 ms
frame straight to its transport, and server frames are parsed in `data_received`; text frames
(the JSON events) are decoded with json.loads, binary frames (reply audio) are only counted.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import struct
import time
from typing import Any, TypeVar, cast

from websockets.speedups import apply_mask  # the C XOR the websockets package ships

from voice_gateway.protocol.uvicorn_ws import payload_span

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
_getrandbits = random.SystemRandom().getrandbits  # unpredictable keys, as RFC 6455 5.3 asks


def frame_header(opcode: int, length: int) -> bytes:
    """FIN + opcode, the MASK bit and the payload length (7, 16 or 64 bits)."""
    if length < 126:
        return struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    if length < 1 << 16:
        return struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    return struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)


def masked_frame(opcode: int, payload: bytes, header: bytes | None = None) -> bytes:
    key = _getrandbits(32).to_bytes(4, "big")
    return (header or frame_header(opcode, len(payload))) + key + apply_mask(payload, key)


class WSError(Exception):
    """The server broke the protocol (or the handshake failed)."""


class LoadCall(asyncio.Protocol):
    """One call: the handshake, then frames both ways. `events` gets (received_at, event) for
    each JSON event the caller asked to keep (see `on_event`)."""

    def __init__(self, host: str, path: str) -> None:
        self.host, self.path = host, path
        self.key = base64.b64encode(os.urandom(16))
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buf = bytearray()
        self.upgraded = False
        self.fragments: list[bytes] = []
        self.fragment_op = 0
        self.close_code: int | None = None
        self.close_sent = False
        self.audio_bytes = 0
        self.audio_waiting = False  # True: call on_audio(at) at the next reply audio frame
        self.errors: list[str] = []

    # ---- outgoing ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        transport.write(
            b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (self.path.encode(), self.host.encode(), self.key)
        )

    def send(self, data: bytes, header: bytes | None = None, opcode: int = OP_BINARY) -> None:
        if self.transport is not None and not self.close_sent:
            self.transport.write(masked_frame(opcode, data, header))

    def send_json(self, event: dict[str, Any]) -> None:
        self.send(json.dumps(event).encode(), opcode=OP_TEXT)

    def send_close(self, code: int) -> None:
        if self.transport is not None and not self.close_sent:
            self.transport.write(masked_frame(OP_CLOSE, struct.pack("!H", code)))
            self.close_sent = True

    # ---- incoming ----------------------------------------------------------------------------

    def on_event(self, at: float, event: dict[str, Any]) -> None:
        """A JSON event from the server (override)."""

    def on_audio(self, at: float) -> None:
        """A reply audio frame arrived while `audio_waiting` was set (override)."""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.upgraded and not self._handshake():
            return
        try:
            self._frames(time.monotonic())
        except WSError as exc:
            self._fail(str(exc))

    def _handshake(self) -> bool:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        del self.buf[: end + 4]
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        accept = base64.b64encode(hashlib.sha1(self.key + GUID).digest()).decode()
        if not head[0].startswith("HTTP/1.1 101") or headers.get("sec-websocket-accept") != accept:
            self._fail(f"handshake refused: {head[0]}")
            return False
        if headers.get("sec-websocket-extensions"):
            self._fail("the server negotiated an extension nobody asked for")
            return False
        self.upgraded = True
        self.opened.set_result(None)
        return True

    def _frames(self, at: float) -> None:
        buf, pos, n = self.buf, 0, len(self.buf)
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            if b1 & 0x80:
                raise WSError("the server masked a frame")
            if b0 & 0x70:
                raise WSError("reserved bits set (no extension was negotiated)")
            span = payload_span(buf, pos, n)
            if span is None:
                break
            length, start = span
            if n - start < length:
                break
            pos = start + length
            opcode, fin = b0 & 0x0F, b0 & 0x80
            if opcode == OP_BINARY and fin and not self.fragments:
                self.audio_bytes += length  # the common case: reply audio, counted only
                if self.audio_waiting:
                    self.on_audio(at)
                continue
            self._frame(at, opcode, bool(fin), bytes(buf[start:pos]))
        del buf[:pos]

    def _frame(self, at: float, opcode: int, fin: bool, payload: bytes) -> None:
        if opcode >= OP_CLOSE:
            if not fin or len(payload) > 125:
                raise WSError("a fragmented or oversized control frame")
            if opcode == OP_PING:
                self.send(payload, opcode=OP_PONG)
            elif opcode == OP_CLOSE:
                if len(payload) == 1:
                    raise WSError("a close frame with a one-byte payload")
                self.close_code = struct.unpack("!H", payload[:2])[0] if payload else 1005
                self.send_close(self.close_code if payload else 1000)  # echo (RFC 6455 5.5.1)
            elif opcode != OP_PONG:
                raise WSError(f"unknown opcode {opcode}")
            return
        if opcode == OP_CONT:
            if not self.fragments:
                raise WSError("a continuation frame with no message to continue")
        elif self.fragments:
            raise WSError("a new message before the last one's final fragment")
        elif opcode not in (OP_TEXT, OP_BINARY):
            raise WSError(f"unknown opcode {opcode}")
        else:
            self.fragment_op = opcode
        self.fragments.append(payload)
        if not fin:
            return
        data, self.fragments = b"".join(self.fragments), []
        if self.fragment_op == OP_BINARY:
            self.audio_bytes += len(data)
            if self.audio_waiting:
                self.on_audio(at)
            return
        try:
            event = json.loads(data.decode("utf-8"))
        except ValueError as exc:
            raise WSError(f"a text frame that is not JSON: {exc}") from exc
        self.on_event(at, event)

    def _fail(self, why: str) -> None:
        self.errors.append(why)
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.opened.done():
            self.opened.set_exception(WSError(f"connection lost before the handshake: {exc}"))
        if self.close_code is None:
            self.close_code = 1006  # no close frame: abnormal closure
        if not self.closed.done():
            self.closed.set_result(None)


C = TypeVar("C", bound=LoadCall)


async def connect(cls: type[C], url: str, *args: Any) -> C:
    """Open a `cls(host, path, *args)` call to ws://host:port/path and wait for the 101."""
    rest = url.removeprefix("ws://")
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    loop = asyncio.get_running_loop()
    _, call = await loop.create_connection(
        lambda: cls(hostport, "/" + path, *args), host, int(port or 80)
    )
    await call.opened
    return call
