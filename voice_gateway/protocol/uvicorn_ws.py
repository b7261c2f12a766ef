"""uvicorn's websockets-sansio WebSocket protocol with a fast path for plain data frames.

A call sends 50 small binary frames a second. At hundreds of calls per process, half of the
event loop's time went to the generic receive path (bench/voice_concurrency.py, profiled):
the `websockets` sans-I/O parser's generator chain (read_exact, Frame.parse, Opcode(...)),
an asyncio.Queue per connection, and reading paused and resumed around every message (two
system calls per frame). This subclass of uvicorn's own protocol (uvicorn and websockets are
pinned to exact versions in pyproject.toml, as it relies on their internals) changes only that:

- Once the handshake is done, this class frames the byte stream itself. A complete, final,
  masked text or binary frame (RSV bits clear; no extension is ever negotiated with it), not
  inside a fragmented message, on an open connection, is unmasked and queued directly.
  Every other frame (ping, pong, close, fragments, invalid UTF-8) is handed to the
  inherited `websockets` path whole and byte for byte, and the library is only ever handed
  whole frames, so it is always at a frame boundary: pings, close codes 1002/1007/1009 and
  the closing handshake stay the library's. A frame that breaks the protocol (unmasked,
  reserved bits, over `ws_max_size`), the start of a close, or a client that sent bytes before
  the 101 (RFC 6455 4.1) puts the connection on the library's path for good.
- Messages wait in a deque with one waiter future instead of an asyncio.Queue.
- Reading is paused when `ws_max_queue` messages wait unread (backpressure) and resumed when
  half of them are read, instead of after each message.
- An audio sink (the `voice_gateway.audio_sink` ASGI extension: `set(sink)` for binary
  frames, `set_text(sink)` for text frames, e.g. Twilio's JSON media messages): while the app's
  reader waits with nothing queued, such a frame goes straight to `sink(payload)` (bytes, or
  the decoded str) from the read callback; the sink returns False to have it queued as usual.
  That skips the waiter future, the reader task's wake-up and its coroutine chain for most of
  a call's frames (pipeline/input.py `InputPath.now`; measured in docs/benchmarks.md).
- Outgoing data frames (the app's `websocket.send`) are framed here and written once per event
  loop iteration: what a call sends in one go (a reply's first 240 ms of audio, the events
  that end a turn) is one system call instead of one per message; each message is still its
  own WebSocket frame. Measured (bench/voice_concurrency.py, 100 calls, a turn every 3 s):
  the library's send path with a write per message was 44 µs of main-thread CPU per message
  (cProfile, with the write's system call; 44 messages per turn): see
  docs/benchmarks.md#voice_concurrency. Control frames and the closing
  handshake stay the library's, after a flush of what is pending, so the order on the wire
  is the order of the sends. The `voice_gateway.send_now` extension (`send(data)`) queues a
  data frame the same way without the ASGI send chain, when `send` would not have waited.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - the wheels ship the C extension
    from websockets.utils import apply_mask

log = logging.getLogger(__name__)
_TEXT, _BINARY = 0x81, 0x82  # FIN + opcode, RSV bits clear


def payload_span(data: bytes | bytearray, pos: int, n: int) -> tuple[int, int] | None:
    """The payload length and the offset after the length field (RFC 6455 5.2) of the frame
    whose header starts at `pos` (2 bytes there at least); None while the length field is not
    all in `data[:n]` yet."""
    length, start = data[pos + 1] & 0x7F, pos + 2
    if length == 126:
        if n - pos < 4:
            return None
        return int.from_bytes(data[pos + 2 : pos + 4], "big"), pos + 4
    if length == 127:
        if n - pos < 10:
            return None
        return int.from_bytes(data[pos + 2 : pos + 10], "big"), pos + 10
    return length, start


def frame_head(opcode: int, n: int) -> bytes:
    """The header of a final, unmasked (server) frame with an `n`-byte payload (RFC 6455 5.2)."""
    if n < 126:
        return bytes((opcode, n))
    if n < 65536:
        return bytes((opcode, 126)) + n.to_bytes(2, "big")
    return bytes((opcode, 127)) + n.to_bytes(8, "big")


SINK_EXTENSION = "voice_gateway.audio_sink"  # scope["extensions"][...]["set"](sink | None)
SEND_EXTENSION = "voice_gateway.send_now"  # scope["extensions"][...]["send"](bytes | str)
_MAX_HEAD = 65536  # request heads are smaller (the library refuses bigger ones anyway)


class _Inbox:
    """What uvicorn's protocol uses of asyncio.Queue (put_nowait, empty), with one waiter
    future: ASGI has one reader per connection."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: deque[ASGIReceiveEvent] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: ASGIReceiveEvent) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def empty(self) -> bool:
        return not self.items


class FastWebSocketProtocol(WebSocketsSansIOProtocol):
    """Select it with `uvicorn.Config(ws=FastWebSocketProtocol)` (see `ws_protocol`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inbox = _Inbox()
        self.queue = self.inbox  # type: ignore[assignment]  # the inherited code queues here
        self.max_queue = max(1, self.config.ws_max_queue)
        self.fast = False  # this class frames the stream (from the 101 on)
        self.head: bytearray | None = bytearray()  # the request head until its end is seen
        self.clean = True  # the library has seen the request head and nothing after it
        self.buf = bytearray()  # the start of a frame still incomplete (fast mode)
        self.need = 0  # that frame's length, once its header is in
        self.owed = 0  # bytes of a frame being passed to the library still to come
        self.out: list[bytes] = []  # frames to write at the end of this loop iteration
        self.sink: Callable[[bytes], bool] | None = None  # see SINK_EXTENSION
        self.text_sink: Callable[[str], bool] | None = None

    async def run_asgi(self) -> None:
        self.scope["extensions"][SINK_EXTENSION] = {
            "set": self._set_sink,
            "set_text": self._set_text_sink,
        }
        self.scope["extensions"][SEND_EXTENSION] = {"send": self.send_now}
        await super().run_asgi()

    def _set_sink(self, sink: Callable[[bytes], bool] | None) -> None:
        self.sink = sink

    def _set_text_sink(self, sink: Callable[[str], bool] | None) -> None:
        self.text_sink = sink

    # ---- the handshake: the library's, then the fast path if nothing else arrived ---------

    def data_received(self, data: bytes) -> None:
        if self.out:
            self._flush()  # the library may answer (a pong, a close) after what we sent
        if self.fast:
            self._frames(data)
            return
        self._note(data)
        super().data_received(data)

    def _note(self, data: bytes) -> None:
        head = self.head
        if head is None:
            self.clean = False  # frames before the 101, or the library's path for good
            return
        head += data
        end = head.find(b"\r\n\r\n")
        if end >= 0 or len(head) > _MAX_HEAD:
            self.clean = end >= 0 and len(head) == end + 4
            self.head = None

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "websocket.send" and self._may_frame():
            await self.writable.wait()  # the transport's flow control, as the library's path
            if self.disconnected:
                raise ClientDisconnected()
            if self._may_frame():
                data, text = message.get("bytes"), message.get("text")
                if data is not None:
                    self._queue_frame(_BINARY, data)
                    return
                if text is not None:
                    self._queue_frame(_TEXT, text.encode())
                    return
        if self.out:
            self._flush()
        await super().send(message)
        if message["type"] == "websocket.accept":
            conn = self.conn
            self.fast = (
                self.clean
                and self.head is None
                and self.handshake_complete
                and not self.close_sent
                and conn.state is State.OPEN
                and not conn.extensions
                and not conn.reader.buffer
            )

    # ---- sending ----------------------------------------------------------------------------

    def _may_frame(self) -> bool:
        """An open connection, handshake done, no extension: a data frame is ours to write."""
        conn = self.conn
        return (
            self.handshake_complete
            and self.initial_response is None
            and not self.close_sent
            and conn.state is State.OPEN
            and not conn.extensions
        )

    def send_now(self, data: bytes | str) -> bool:
        """A data frame queued at once (the `voice_gateway.send_now` extension), if `send`
        would queue it without waiting: the transport takes writes and the connection is
        open. False: use `send`. What it skips per message (the ASGI send chain: Starlette's
        WebSocket.send and exception wrapper, this class's `send`, the flow-control wait, four
        coroutines) is what a reply's 20 ms audio frames and events paid one by one
        (docs/benchmarks.md, `voice_concurrency`)."""
        if self.disconnected or not self.writable.is_set() or not self._may_frame():
            return False
        if isinstance(data, str):
            self._queue_frame(_TEXT, data.encode())
        else:
            self._queue_frame(_BINARY, data)
        return True

    def _queue_frame(self, opcode: int, payload: bytes) -> None:
        out = self.out
        out.append(frame_head(opcode, len(payload)))
        out.append(payload)
        if len(out) == 2:
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        out, self.out = self.out, []
        if out and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    # ---- frames ------------------------------------------------------------------------------

    def _frames(self, data: bytes) -> None:
        if self.owed:
            data = self._pay(data)
        if self.buf:
            self.buf += data
            if len(self.buf) < self.need:
                return  # a long frame still arriving: no copy per read
            data = bytes(self.buf)
            self.buf.clear()
        conn = self.conn
        limit = conn.max_message_size
        n, pos, need = len(data), 0, 0
        while n - pos >= 2:
            if self.close_sent or conn.state is not State.OPEN:
                self._leave(data[pos:])
                return
            b0, b1 = data[pos], data[pos + 1]
            span = payload_span(data, pos, n)
            if span is None:
                break
            length, start = span
            if not b1 & 0x80 or b0 & 0x70 or (limit is not None and length > limit):
                self._leave(data[pos:])  # unmasked, RSV bits, too big: the library fails it
                return
            end = start + 4 + length
            if (b0 == _BINARY or b0 == _TEXT) and conn.current_size is None:
                if end > n:
                    need = end - pos
                    break
                payload = apply_mask(data[start + 4 : end], data[start : start + 4])
                if b0 == _BINARY:
                    if not self._sunk(self.sink, payload):
                        self._deliver({"type": "websocket.receive", "bytes": payload})
                else:
                    try:
                        text = payload.decode()
                    except UnicodeDecodeError:
                        super().data_received(data[pos:end])  # the library's path: 1007
                    else:
                        if not self._sunk(self.text_sink, text):
                            self._deliver({"type": "websocket.receive", "text": text})
            elif end > n:  # a control frame or a fragment: the library reads it
                self.owed = end - n
                super().data_received(data[pos:])
                return
            else:
                super().data_received(data[pos:end])
            pos = end
        self.need = need
        if pos < n:
            self.buf += data[pos:]

    def _pay(self, data: bytes) -> bytes:
        """Hand the library the rest of the frame it is reading; return what follows it."""
        owed = self.owed
        if len(data) <= owed:
            self.owed = owed - len(data)
            super().data_received(data)
            return b""
        self.owed = 0
        super().data_received(data[:owed])
        return data[owed:]

    def _leave(self, rest: bytes) -> None:
        """The library's path for good, from a frame boundary."""
        self.fast = False
        self.clean = False
        if rest:
            super().data_received(rest)

    # ---- the app's side ----------------------------------------------------------------------

    def _sunk(self, sink: Callable[[Any], bool] | None, payload: bytes | str) -> bool:
        """Did the sink take the frame? Only while the reader waits and nothing is queued, so
        the app sees every message in order."""
        inbox = self.inbox
        waiter = inbox.waiter
        if sink is None or waiter is None or waiter.done() or inbox.items:
            return False
        try:
            return sink(payload)
        except Exception:  # the read callback must not fail: the app's own path reports it
            log.exception("the audio sink failed; frames go to the app's reader from now on")
            self.sink = self.text_sink = None
            return False

    def _deliver(self, message: ASGIReceiveEvent) -> None:
        inbox = self.inbox
        inbox.put_nowait(message)
        if not self.read_paused and len(inbox.items) >= self.max_queue:
            self.read_paused = True
            self.transport.pause_reading()

    async def receive(self) -> ASGIReceiveEvent:
        """The next message. The inherited path pauses reading after each message it queues;
        either way reading resumes once at most half of `ws_max_queue` messages wait."""
        inbox = self.inbox
        while not inbox.items:
            # self.loop, not asyncio.get_running_loop(): on 3.11 that is a getpid() system
            # call, once per frame here
            waiter = inbox.waiter = self.loop.create_future()
            await waiter
        message = inbox.items.popleft()
        if self.read_paused and len(inbox.items) <= self.max_queue // 2:
            self.read_paused = False
            self.transport.resume_reading()
        return message


def ws_protocol(fast_path: bool) -> type[asyncio.Protocol] | str:
    """uvicorn's `ws` option for the gateway: this class, or uvicorn's own sans-I/O protocol."""
    return FastWebSocketProtocol if fast_path else "websockets-sansio"
