"""A WebRTC peer connection as a `Transport`: caller audio from the Opus track, the voice
socket's JSON events on the data channel `events` (both ways), reply audio on `ReplyTrack`.

The pipeline cannot tell it from the browser socket: it gets the same `Inbound` items. What
the socket says with a close code, this transport says with a last event on the channel,
`session.closed {code, reason}`, before it closes the peer connection."""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from typing import Any

from aiortc import MediaStreamTrack, RTCDataChannel, RTCPeerConnection
from aiortc.mediastreams import MediaStreamError

from voice_gateway.pipeline.transport import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    AudioIn,
    Closed,
    Control,
    Inbound,
    StartInfo,
    Transport,
)
from voice_gateway.protocol.browser import (
    ClientEvent,
    ProtocolError,
    SessionStart,
    parse_client_event,
)
from voice_gateway.protocol.browser_transport import inbound_of
from voice_gateway.webrtc.media import IN_RATE, OUT_RATE, Downmix, ReplyTrack

log = logging.getLogger(__name__)

CLOSE_GONE = 1005  # the peer left without a word (ICE failed, connection closed)
EVENTS_LABEL = "events"
MAX_MESSAGE_CHARS = 64 * 1024  # the voice socket's frame limit


class PeerState(enum.Enum):
    CONNECTING = "connecting"  # answered; ICE/DTLS not up yet
    CONNECTED = "connected"
    CLOSED = "closed"  # by us or by the peer; the peer connection is (being) closed


Item = Inbound | ClientEvent


class WebRTCTransport(Transport):
    source = "voice"
    name = "webrtc"

    def __init__(self, pc: RTCPeerConnection, agent_id: str, *, events: bool) -> None:
        self.pc = pc
        self.agent_id = agent_id
        self.events = events  # the offer has a data channel: wait for its session.start
        self.state = PeerState.CONNECTING
        self.track = ReplyTrack()
        self.remote: MediaStreamTrack | None = None
        self.channel: RTCDataChannel | None = None
        self.started = False
        self.connected = asyncio.Event()
        self.inbox: asyncio.Queue[Item] = asyncio.Queue()
        self.close_code: int | None = None
        self._pc_closed = False
        pc.on("datachannel", self._on_channel)
        pc.on("connectionstatechange", self._on_state)

    # -- aiortc callbacks (synchronous) --------------------------------------------------------

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_LABEL or self.channel is not None:
            log.info("data channel %r ignored (only one %r is used)", channel.label, EVENTS_LABEL)
            return
        self.channel = channel
        channel.on("message", self._on_message)
        channel.on("close", lambda: self._gone("data channel closed"))

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self._send_now(
                {
                    "type": "error",
                    "code": "invalid_event",
                    "message": "binary messages are not used on the events channel: "
                    "audio goes on the audio track",
                    "fatal": False,
                }
            )
            return
        if len(message) > MAX_MESSAGE_CHARS:
            self._send_now(
                {
                    "type": "error",
                    "code": "invalid_event",
                    "message": f"an events message is at most {MAX_MESSAGE_CHARS} characters",
                    "fatal": False,
                }
            )
            return
        try:
            self.inbox.put_nowait(parse_client_event(message))
        except ProtocolError as exc:
            self._send_now({"type": "error", "code": exc.code, "message": str(exc), "fatal": False})

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state == "connected" and self.state == PeerState.CONNECTING:
            self.state = PeerState.CONNECTED
            self.connected.set()
        elif state in ("failed", "closed"):
            self._gone(f"peer connection {state}")

    def hang_up(self) -> None:
        """DELETE on the call's URL: the caller hung up (the reply is cut where it was heard)."""
        if self.close_code is None:
            self.close_code = CLOSE_NORMAL
            self.inbox.put_nowait(Closed(CLOSE_NORMAL))

    def _gone(self, why: str) -> None:
        if self.close_code is None:
            log.info("peer gone: %s", why)
            self.close_code = CLOSE_GONE
            self.inbox.put_nowait(Closed(CLOSE_GONE))

    # -- Transport ----------------------------------------------------------------------------

    def info(self, event: SessionStart | None) -> StartInfo:
        return StartInfo(
            input_rate=IN_RATE,
            output_rate=OUT_RATE,
            conversation_id=event.conversation_id if event else None,
            agent_id=self.agent_id,
            extra={"transport": "webrtc"},
            caller=event.caller if event else None,
        )

    async def start(self) -> StartInfo | None:
        if not self.events:  # a media-only (WHIP) client: the call starts when media can flow
            waiter = asyncio.ensure_future(self.connected.wait())
            closed = asyncio.ensure_future(self.inbox.get())  # only a Closed can come
            try:
                await asyncio.wait([waiter, closed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
                closed.cancel()
            self.started = self.connected.is_set() and self.close_code is None
            return self.info(None) if self.started else None
        while True:
            item = await self.inbox.get()
            if isinstance(item, Closed):
                return None
            if isinstance(item, SessionStart):
                self.started = True
                return self.info(item)
            if not isinstance(item, AudioIn):  # audio before the start is dropped silently
                kind = getattr(item, "type", "event")
                await self.error("not_started", f"{kind} before session.start was ignored")

    async def receive(self) -> Inbound:
        while True:
            item = await self.inbox.get()
            if isinstance(item, AudioIn | Closed | Control):
                return item
            inbound = inbound_of(item)
            if inbound is not None:
                return inbound
            await self.error("already_started", "session.start was sent twice; ignored")

    def _send_now(self, event: dict[str, Any]) -> None:
        ch = self.channel
        if ch is not None and ch.readyState == "open":
            ch.send(json.dumps(event))

    async def send_event(self, event: dict[str, Any]) -> None:
        self._send_now(event)

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        if self.state != PeerState.CLOSED:
            self.track.push(pcm)

    async def clear_audio(self) -> None:
        self.track.clear()
        await self.send_event({"type": "audio.clear"})

    async def close(self, code: int, reason: str = "") -> None:
        """Say why (`session.closed`), then close the peer connection (idempotent)."""
        if self.close_code is None:
            self.close_code = code
            self.inbox.put_nowait(Closed(code))
        if self.state != PeerState.CLOSED:
            self.state = PeerState.CLOSED
            self.track.clear()
            self._send_now({"type": "session.closed", "code": code, "reason": reason})
            await self._flush_channel()
        if not self._pc_closed:
            self._pc_closed = True
            await self.pc.close()

    async def _flush_channel(self, limit_s: float = 0.5) -> None:
        ch = self.channel
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        # bounded poll, once per call: aiortc has no "buffer drained" event on a channel
        while ch is not None and ch.readyState == "open" and loop.time() < deadline:
            if not ch.bufferedAmount:
                await asyncio.sleep(0.02)  # handed to SCTP: give it one round to go out
                return
            await asyncio.sleep(0.01)

    # -- inbound audio ------------------------------------------------------------------------

    async def pump(self, idle_timeout_s: float) -> None:
        """Caller audio into the inbox (from the start on; dropped before session.start). No
        frame for `idle_timeout_s` ends the call (1001), a track that ends is a gone peer."""
        track = self.remote
        if track is None:
            return
        downmix = Downmix()
        while True:
            try:
                async with asyncio.timeout(idle_timeout_s):
                    frame = await track.recv()
            except TimeoutError:
                await self.close(CLOSE_GOING_AWAY, "no media")
                return
            except MediaStreamError:
                self._gone("audio track ended")
                return
            if self.started and self.close_code is None:
                self.inbox.put_nowait(AudioIn(downmix.pcm(frame)))  # type: ignore[arg-type]
