"""The browser voice socket as a Transport: JSON events + binary PCM16 frames."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from agents.approvals import Answer
from voice_gateway.pipeline.transport import (
    CLOSE_TOO_BIG,
    Answered,
    AudioIn,
    Closed,
    Control,
    Inbound,
    Played,
    StartInfo,
    TextIn,
)
from voice_gateway.protocol.browser import (
    MAX_BINARY_FRAME,
    ApprovalResponse,
    AudioPlayed,
    InputText,
    ProtocolError,
    ResponseCancel,
    SessionEnd,
    SessionStart,
    ToolResultIn,
    parse_client_event,
)
from voice_gateway.protocol.socket import SocketTransport
from voice_gateway.protocol.uvicorn_ws import SEND_EXTENSION, SINK_EXTENSION

# session.start's turn-taking options, checked by the session (pipeline/overlap.py)
TURN_KEYS = ("turn_detection", "echo_cancellation", "turn_silence_ms", "turn_max_silence_ms")
START_KEYS = (
    *TURN_KEYS,
    "record",
)  # and whether the call is recorded (voice_gateway/recordings.py)

log = logging.getLogger(__name__)


class BrowserTransport(SocketTransport):
    source = "voice"

    def __init__(self, ws: WebSocket, agent_id: str) -> None:
        self.ws = ws
        self.agent_id = agent_id
        self.closed = False
        # on our own WebSocket protocol: queue a message without the ASGI send chain
        self.send_now: Callable[[bytes | str], bool] | None = self._extension(
            SEND_EXTENSION, "send"
        )

    async def _next(self) -> dict[str, Any] | None:
        """One raw frame, with the size limit applied; None when the peer is gone."""
        try:
            msg = await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        return await self._check(msg)

    async def _check(self, msg: Message) -> dict[str, Any] | None:
        """The disconnect and size checks of a raw frame (None: the socket is done)."""
        if msg["type"] == "websocket.disconnect":
            self.closed = True
            return None
        data = msg.get("bytes")
        if data is not None and len(data) > MAX_BINARY_FRAME:
            await self.error(
                "frame_too_large", f"binary frame of {len(data)} bytes exceeds 64 KiB", fatal=True
            )
            await self.close(CLOSE_TOO_BIG, "frame too large")
            return None
        return dict(msg)

    async def start(self) -> StartInfo | None:
        while True:
            msg = await self._next()
            if msg is None:
                return None
            if msg.get("bytes") is not None:
                await self.error("not_started", "audio before session.start was dropped")
                continue
            try:
                event = parse_client_event(msg.get("text") or "")
            except ProtocolError as exc:
                await self.error(exc.code, str(exc))
                continue
            if not isinstance(event, SessionStart):
                await self.error("not_started", f"{event.type} before session.start was ignored")
                continue
            return StartInfo(
                input_rate=event.input_audio.sample_rate,
                output_rate=event.output_audio.sample_rate,
                conversation_id=event.conversation_id,
                agent_id=self.agent_id,
                extra={
                    "client_tools": [t.model_dump() for t in event.client_tools],
                    **{k: v for k in START_KEYS if (v := getattr(event, k)) is not None},
                },
                caller=event.caller,
            )

    def audio_sink(self, sink: Callable[[bytes], bool] | None) -> bool:
        """On our own WebSocket protocol (protocol/uvicorn_ws.py) binary frames go to `sink`
        from the socket's read callback; what it declines comes through `receive` and its
        checks (size, even length) as before."""
        setter = self._extension(SINK_EXTENSION, "set")
        if setter is None:
            return False
        setter(sink)
        return True

    async def receive(self) -> Inbound:
        while True:
            # fast path, once per 20 ms frame: a binary frame of a sane size
            try:
                raw = await self.ws.receive()
            except (WebSocketDisconnect, RuntimeError):
                return Closed(1005)
            data = raw.get("bytes")
            if data is not None and len(data) <= MAX_BINARY_FRAME and not len(data) % 2:
                return AudioIn(data)
            msg = await self._check(raw)
            if msg is None:
                return Closed(1005)
            data = msg.get("bytes")
            if data is not None:
                if len(data) % 2:
                    await self.error("bad_audio", "PCM16 frames must have an even number of bytes")
                    continue
                return AudioIn(data)
            try:
                event = parse_client_event(msg.get("text") or "")
            except ProtocolError as exc:
                await self.error(exc.code, str(exc))
                continue
            inbound = inbound_of(event)
            if inbound is not None:
                return inbound
            await self.error("already_started", "session.start was sent twice; ignored")

    async def send_event(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        text = json.dumps(event)
        if self.send_now is not None and self.send_now(text):
            return
        try:
            await self.ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        if self.closed or (self.send_now is not None and self.send_now(pcm)):
            return
        try:
            await self.ws.send_bytes(pcm)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True

    async def clear_audio(self) -> None:
        await self.send_event({"type": "audio.clear"})


def inbound_of(event: object) -> Inbound | None:
    """What a client event of a started call means to the session (the voice socket's and the
    WebRTC data channel's alike); None for a second `session.start`."""
    if isinstance(event, InputText):
        return TextIn(event.text, [])
    if isinstance(event, AudioPlayed):
        return Played(event.item_id, event.played_ms)
    if isinstance(event, ResponseCancel):
        return Control("cancel")
    if isinstance(event, SessionEnd):
        return Control("end")
    if isinstance(event, ApprovalResponse):
        return Answered(Answer(event.call_id, approve=event.approve, reason=event.reason))
    if isinstance(event, ToolResultIn):
        return Answered(
            Answer(event.call_id, "tool", tool_return=event.result, status=event.status)
        )
    return None
