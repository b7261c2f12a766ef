"""Twilio Media Streams as a Transport: mu-law 8 kHz in and out, marks, clear, DTMF.

Inbound: connected, start, media, dtmf, mark, stop (Twilio's own JSON). Outbound: media
(base64 mu-law), a mark after every chunk (Twilio echoes it once the caller has heard the
audio before it; that is what barge-in truncation uses), and clear on barge-in.

Call control goes through Twilio's REST API (`rest`, when credentials are set): the agent's
hang-up completes the call, a transfer moves it to a <Dial> (pipeline/call_control.py)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect
from twilio.twiml.voice_response import Dial, VoiceResponse

from voice_gateway.audio import ulaw_decode, ulaw_encode
from voice_gateway.pipeline.transport import (
    CLOSE_NORMAL,
    CLOSE_POLICY,
    AudioIn,
    Closed,
    Inbound,
    Played,
    StartInfo,
    TextIn,
    TransferFailed,
)
from voice_gateway.protocol.socket import SocketTransport
from voice_gateway.protocol.uvicorn_ws import SEND_EXTENSION, SINK_EXTENSION
from voice_gateway.twilio_rest import TwilioRest, TwilioUnavailable

log = logging.getLogger(__name__)
CLOSE_UNSUPPORTED = 1003  # mediaFormat other than audio/x-mulaw 8000 mono
PHONE_RATE = 8000
DTMF_GAP_S = 1.2  # digits pressed within this gap form one note; '#' ends the entry at once
LOG_EVERY = 500  # repeated bad frames are logged once, then every LOG_EVERY-th time
_SURROGATES = re.compile("[\ud800-\udfff]")
_DECLINED: dict[str, Any] = {"event": "media"}  # stands for the audio the sink declined


def safe_text(value: object) -> str:
    """A string from Twilio's JSON, safe to store and log: JSON may carry lone surrogates
    (\\ud800), which no UTF-8 database or log accepts; they become U+FFFD."""
    s = str(value)
    return s if s.isascii() else _SURROGATES.sub("\ufffd", s)


def dtmf_note(digits: str) -> str:
    return f"[The caller pressed {digits} on the keypad.]"


class TwilioTransport(SocketTransport):
    source = "phone"
    name = "twilio"

    def __init__(self, ws: WebSocket, rest: TwilioRest | None = None) -> None:
        self.ws = ws
        self.rest = rest  # Twilio's REST API (None: no credentials, no transfers)
        self.stream_sid = ""
        self.call_sid = ""
        self.params: dict[str, str] = {}
        self.closed = False  # the socket is gone or closed by us
        self.stopped = False  # Twilio sent `stop`: the call is over, nothing more is played
        self.dropped: dict[str, int] = {}  # bad or early frames by kind
        self._sent_ms: dict[str, float] = {}
        self._last_item: str | None = None
        self._cleared: set[str] = set()  # after `clear` Twilio echoes the remaining marks
        self._digits = ""
        self._digits_due = 0.0
        # on our own WebSocket protocol: queue a message without the ASGI send chain
        self.send_now: Callable[[bytes | str], bool] | None = self._extension(
            SEND_EXTENSION, "send"
        )
        self._declined: tuple[str, bytes] | None = None  # (its text, its audio)
        self._declined_pcm = b""

    def _drop(self, kind: str, message: str, *args: object) -> None:
        n = self.dropped[kind] = self.dropped.get(kind, 0) + 1
        if n == 1 or n % LOG_EVERY == 0:
            log.warning("twilio: " + message + " (%d so far)", *args, n)

    async def _next(self, within: float | None = None) -> dict[str, Any] | None:
        """The next JSON message with an `event`; None when the peer is gone; `{}` when
        nothing arrived `within` seconds."""
        while True:
            try:
                if within is None:
                    msg = await self.ws.receive()
                else:  # asyncio.timeout: on 3.11 wait_for can swallow an outer cancel
                    async with asyncio.timeout(max(0.0, within)):
                        msg = await self.ws.receive()
            except TimeoutError:
                return {}
            except (WebSocketDisconnect, RuntimeError):
                self.closed = True
                return None
            if msg["type"] == "websocket.disconnect":
                self.closed = True
                return None
            text = msg.get("text")
            if text is None:
                self._drop("binary", "binary frame ignored (Media Streams is JSON text)")
                continue
            declined, self._declined = self._declined, None
            if declined is not None and declined[0] is text:  # the sink decoded it already
                self._declined_pcm = declined[1]
                return _DECLINED
            try:
                data = json.loads(text)
            # ValueError covers JSONDecodeError and, found by tests/fuzz, numbers of over 4300
            # digits; RecursionError: nested too deeply
            except (ValueError, RecursionError):
                self._drop("json", "ignoring a frame that is not JSON")
                continue
            if isinstance(data, dict) and isinstance(data.get("event"), str):
                return data
            self._drop("no_event", "ignoring a message without an event")

    async def start(self) -> StartInfo | None:
        while True:
            msg = await self._next()
            if msg is None:
                return None
            event = msg["event"]
            if event == "connected":
                continue
            if event == "stop":
                await self.close(CLOSE_NORMAL, "stopped before start")
                return None
            if event != "start":
                self._drop("before_start", "%r before start ignored", event)
                continue
            start = msg.get("start")
            return await self._started(start if isinstance(start, dict) else {})

    async def _started(self, start: dict[str, Any]) -> StartInfo | None:
        self.stream_sid = safe_text(start.get("streamSid") or "")
        self.call_sid = safe_text(start.get("callSid") or "")
        fmt = start.get("mediaFormat")
        fmt = fmt if isinstance(fmt, dict) else {}
        rate, channels = str(fmt.get("sampleRate", "")), str(fmt.get("channels", 1))
        if fmt.get("encoding") != "audio/x-mulaw" or rate != "8000" or channels != "1":
            log.warning("twilio: unsupported mediaFormat %s; closing %s", fmt, self.stream_sid)
            await self.close(CLOSE_UNSUPPORTED, "mediaFormat must be audio/x-mulaw 8000 mono")
            return None
        params = start.get("customParameters") or {}
        self.params = (  # a JSON null is no value (not the text "None")
            {safe_text(k): safe_text(v) for k, v in params.items() if v is not None}
            if isinstance(params, dict)
            else {}
        )
        agent_id = self.params.get("agent_id")
        if not agent_id:
            log.warning("twilio: start without an agent_id parameter; closing %s", self.stream_sid)
            await self.close(CLOSE_POLICY, "missing agent_id parameter")
            return None
        return StartInfo(
            input_rate=PHONE_RATE,
            output_rate=PHONE_RATE,
            # the platform's call id: a withheld number's call is a conversation under it; a
            # caller with a number continues their own (pipeline/callers.py)
            conversation_id=self.call_sid[:64] or None,
            agent_id=agent_id,
            extra=dict(self.params),
        )

    async def receive(self) -> Inbound:
        while True:
            timeout = None
            if self._digits:
                timeout = self._digits_due - time.monotonic()
                if timeout <= 0:
                    return self._digit_turn()
            msg = await self._next(timeout)
            if msg is None:
                return Closed(1005)
            if not msg:  # the keypad gap passed with nothing else arriving
                continue
            item = self._inbound(msg)
            if item is not None:
                return item

    def audio_sink(self, sink: Callable[[bytes], bool] | None) -> bool:
        """On our own WebSocket protocol (protocol/uvicorn_ws.py) a well-formed `media`
        message is decoded in the socket's read callback and its audio (8 kHz PCM16) offered to
        `sink`, as the browser's binary frames are: no reader wake-up, no ASGI receive chain.
        Every other message, and audio the sink declines, comes through `receive` as before
        (a declined frame is not decoded twice: it is the next message `receive` reads)."""
        setter = self._extension(SINK_EXTENSION, "set_text")
        if setter is None:
            return False
        if sink is None:
            setter(None)
            return True

        def take(text: str) -> bool:
            pcm = self._media_pcm(text)
            if pcm is None:
                return False
            if sink(pcm):
                return True
            self._declined = (text, pcm)
            return False

        setter(take)
        return True

    @staticmethod
    def _media_pcm(text: str) -> bytes | None:
        """The audio of a well-formed `media` message; None for anything else, which `receive`
        then reads (and reports) as usual."""
        try:
            msg = json.loads(text)
            payload = msg["media"]["payload"] if msg["event"] == "media" else None
            raw = base64.b64decode(payload, validate=True) if isinstance(payload, str) else b""
        except (ValueError, RecursionError, TypeError, KeyError, binascii.Error):
            return None
        return ulaw_decode(raw).tobytes() if raw else None

    def _inbound(self, msg: dict[str, Any]) -> Inbound | None:
        event = msg.get("event")
        if msg is _DECLINED:
            return AudioIn(self._declined_pcm)
        if event == "media":
            media = msg.get("media")
            payload = media.get("payload", "") if isinstance(media, dict) else None
            try:
                raw = base64.b64decode(payload, validate=True)  # type: ignore[arg-type]
            except (binascii.Error, ValueError, TypeError):
                self._drop("base64", "media with bad base64 dropped")
                return None
            return AudioIn(ulaw_decode(raw).tobytes())
        if event == "mark":
            mark = msg.get("mark")
            played = self._played(mark.get("name", "") if isinstance(mark, dict) else "")
            if played is not None and played.item_id not in self._cleared:
                return played
            return None
        if event == "dtmf":
            dtmf = msg.get("dtmf")
            digit = str(dtmf.get("digit", "")) if isinstance(dtmf, dict) else ""
            if len(digit) != 1 or digit not in "0123456789*#ABCD":
                self._drop("dtmf", "dtmf without a valid digit ignored")
                return None
            self._digits += digit
            self._digits_due = time.monotonic() + (0 if digit == "#" else DTMF_GAP_S)
            return None
        if event == "stop":
            # the caller hung up (or the stream ended): nothing more can be played; the
            # session stores the reply cut at what the echoed marks say was heard
            self.stopped = True
            return Closed(CLOSE_NORMAL)
        if event not in ("connected", "start"):
            self._drop("unknown", "unknown event %r ignored", str(event)[:40])
        return None

    def _digit_turn(self) -> TextIn:
        """Keypad digits as a turn of their own (the caller may speak as well: an utterance
        in progress takes the note in, see VoiceSession._process_turns)."""
        digits, self._digits = self._digits, ""
        return TextIn(dtmf_note(digits), [])

    @staticmethod
    def _played(name: object) -> Played | None:
        item, sep, ms = str(name).rpartition(":")
        if not sep or not ms.isdigit():
            return None
        return Played(item, int(ms))

    async def send_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "error":
            log.warning("call error (%s): %s", event.get("code"), event.get("message"))

    async def _send(self, msg: dict[str, Any]) -> None:
        if self.closed or self.stopped:
            return
        text = json.dumps(msg)
        if self.send_now is not None and self.send_now(text):
            return
        try:
            await self.ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        payload = base64.b64encode(ulaw_encode(np.frombuffer(pcm, dtype="<i2"))).decode()
        total = self._sent_ms.get(item_id, 0.0) + len(pcm) / 2 / PHONE_RATE * 1000
        self._sent_ms[item_id] = total
        self._last_item = item_id
        await self._send(
            {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}}
        )
        await self._send(
            {
                "event": "mark",
                "streamSid": self.stream_sid,
                "mark": {"name": f"{item_id}:{round(total)}"},
            }
        )

    async def clear_audio(self) -> None:
        if self._last_item is not None:
            self._cleared.add(self._last_item)
        await self._send({"event": "clear", "streamSid": self.stream_sid})

    async def end(self, end_reason: str) -> None:
        """The agent hung up (or left a voicemail): the call is completed over REST (when
        credentials are set and it is still ours; a transferred call is not), then the stream
        is closed."""
        ours = end_reason in ("agent_ended", "voicemail")
        if ours and self.rest is not None and not self.stopped:
            try:
                await self.rest.complete(self.call_sid)
            except TwilioUnavailable as exc:
                log.warning("twilio: could not complete call %s: %s", self.call_sid, exc.detail)
        await self.close(CLOSE_NORMAL, end_reason)

    async def transfer(self, target: str, destination: str, mode: str, summary: str) -> bool:
        """Cold: the call's TwiML becomes a <Dial> to `destination`. Warm: a second call to
        `destination` hears the summary (<Say>) and joins a <Conference>; then the caller is
        moved into it."""
        if self.rest is None or self.stopped or not self.call_sid:
            raise TransferFailed("transfers need Twilio REST credentials on this gateway")
        try:
            if mode == "warm":
                room = f"transfer-{self.call_sid}"
                ours, _ = await self.rest.numbers(self.call_sid)
                leg = VoiceResponse()
                if summary:
                    leg.say(summary)
                leg.append(_conference(room))
                await self.rest.create_leg(destination, ours, str(leg.to_xml()))
                caller = VoiceResponse()
                caller.append(_conference(room))
                await self.rest.redirect(self.call_sid, str(caller.to_xml()))
            else:
                await self.rest.redirect(self.call_sid, dial_twiml(destination))
        except TwilioUnavailable as exc:
            raise TransferFailed(exc.detail) from exc
        return True


def dial_twiml(destination: str) -> str:
    """<Response><Dial>number</Dial></Response> (a sip: URI inside <Sip>)."""
    twiml = VoiceResponse()
    if destination.startswith("sip:"):
        dial = Dial()
        dial.sip(destination)
        twiml.append(dial)
    else:
        twiml.dial(destination)
    return str(twiml.to_xml())


def _conference(room: str) -> Dial:
    dial = Dial()
    dial.conference(room, end_conference_on_exit=True)
    return dial
