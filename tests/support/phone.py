"""Twilio's side of a phone call, for tests and benchmarks: the signed voice webhook, and a
Media Stream over a real WebSocket that speaks Twilio's exact JSON (connected, start, media
every 20 ms, dtmf, mark echoes, stop) and plays the gateway's media back in real time."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import websockets
from twilio.request_validator import RequestValidator
from websockets.asyncio.client import ClientConnection

from tests.support.fake_llm import FakeLLM
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread
from voice_gateway.audio import StreamingResampler, ulaw_decode, ulaw_encode

FRAME = 160  # 20 ms of 8 kHz mu-law
SILENCE = b"\xff" * FRAME  # mu-law digital silence
TOKEN = "twilio-test-auth-token"


def call_form(call_sid: str) -> dict[str, str]:
    """What Twilio POSTs to the voice webhook when a call comes in."""
    return {
        "AccountSid": "AC" + "0" * 32,
        "ApiVersion": "2010-04-01",
        "CallSid": call_sid,
        "CallStatus": "ringing",
        "Called": "+15005550006",
        "Caller": "+14155550100",
        "Direction": "inbound",
        "From": "+14155550100",
        "To": "+15005550006",
    }


def sign(url: str, form: dict[str, str], token: str = TOKEN) -> str:
    return RequestValidator(token).compute_signature(url, form)


@dataclass
class TwiML:
    stream_url: str
    parameters: dict[str, str]


def parse_twiml(xml: str) -> TwiML:
    root = ET.fromstring(xml)
    assert root.tag == "Response", xml
    stream = root.find("./Connect/Stream")
    assert stream is not None, xml
    params = {p.attrib["name"]: p.attrib["value"] for p in stream.findall("./Parameter")}
    return TwiML(stream.attrib["url"], params)


def pcm_to_ulaw(pcm8k: np.ndarray) -> bytes:
    return ulaw_encode(pcm8k.astype(np.int16))


@dataclass
class Outbound:
    at: float
    msg: dict[str, Any]


@dataclass
class TwilioCall:
    """One Media Stream. `line` sends a 20 ms media frame every 20 ms (queued speech, else
    silence), as Twilio does for the whole call; marks are echoed when the audio sent before
    them has played (in real time); `clear` drops unplayed audio and echoes pending marks."""

    url: str
    call_sid: str
    parameters: dict[str, str]
    stream_sid: str = "MZ" + "1" * 32
    media_format: dict[str, Any] = field(
        default_factory=lambda: {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
    )
    echo_marks: bool = True
    mark_limit_ms: int | None = None  # echo no mark past this much audio (playback stalled)
    received: list[Outbound] = field(default_factory=list)
    echoed: list[tuple[float, str]] = field(default_factory=list)  # (when, mark name) sent back
    close_code: int | None = None
    close_reason: str = ""
    ws: ClientConnection | None = None
    _seq: int = 0
    _chunk: int = 0
    _queue: bytearray = field(default_factory=bytearray)
    _queued_sent: asyncio.Event = field(default_factory=asyncio.Event)
    _play_end: float = 0.0
    _pending_marks: list[tuple[float, str]] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self) -> TwilioCall:
        self.ws = await websockets.connect(self.url, compression=None, max_size=2**22)
        self._tasks.append(asyncio.create_task(self._read()))
        return self

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.ws is not None
        self._seq += 1
        await self.ws.send(json.dumps({"sequenceNumber": str(self._seq), **msg}))

    async def send_raw(self, data: str | bytes) -> None:
        assert self.ws is not None
        await self.ws.send(data)

    async def connected(self) -> None:
        assert self.ws is not None
        await self.ws.send(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )

    def start_message(self) -> dict[str, Any]:
        return {
            "event": "start",
            "start": {
                "accountSid": "AC" + "0" * 32,
                "streamSid": self.stream_sid,
                "callSid": self.call_sid,
                "tracks": ["inbound"],
                "mediaFormat": self.media_format,
                "customParameters": self.parameters,
            },
            "streamSid": self.stream_sid,
        }

    async def begin(self, *, line: bool = True) -> None:
        """connected + start, then (with `line`) the continuous 20 ms media of a phone line."""
        await self.connected()
        await self.send(self.start_message())
        if line:
            self._tasks.append(asyncio.create_task(self._line()))
        if self.echo_marks:
            self._tasks.append(asyncio.create_task(self._echo()))

    def media_message(self, payload: bytes | str) -> dict[str, Any]:
        self._chunk += 1
        text = payload if isinstance(payload, str) else base64.b64encode(payload).decode()
        return {
            "event": "media",
            "media": {
                "track": "inbound",
                "chunk": str(self._chunk),
                "timestamp": str(self._chunk * 20),
                "payload": text,
            },
            "streamSid": self.stream_sid,
        }

    async def _line(self) -> None:
        t0 = time.monotonic()
        n = 0
        while True:
            n += 1
            delay = t0 + n * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            frame = bytes(self._queue[:FRAME]) or SILENCE
            del self._queue[:FRAME]
            if not self._queue:
                self._queued_sent.set()
            try:
                await self.send(self.media_message(frame.ljust(FRAME, b"\xff")))
            except websockets.ConnectionClosed:
                return

    async def say(self, pcm8k: np.ndarray, *, wait: bool = True) -> float:
        """Queue caller speech (8 kHz PCM16) on the line; returns when its last frame was sent
        (the monotonic time of the end of speech)."""
        self._queued_sent.clear()
        self._queue += pcm_to_ulaw(pcm8k)
        if wait:
            await self._queued_sent.wait()
        return time.monotonic()

    async def dtmf(self, digit: str) -> None:
        await self.send(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    async def stop(self) -> None:
        await self.send(
            {
                "event": "stop",
                "streamSid": self.stream_sid,
                "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid},
            }
        )

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                now = time.monotonic()
                msg = json.loads(raw)
                self.received.append(Outbound(now, msg))
                self._play(now, msg)
                self._changed.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.close_reason = self.ws.close_reason or ""
            self._changed.set()

    def _play(self, now: float, msg: dict[str, Any]) -> None:
        event = msg.get("event")
        if event == "media":
            n = len(base64.b64decode(msg["media"]["payload"]))
            self._play_end = max(self._play_end, now) + n / 8000
        elif event == "mark":
            name = msg["mark"]["name"]
            if self.mark_limit_ms is None or int(name.rpartition(":")[2]) <= self.mark_limit_ms:
                self._pending_marks.append((max(self._play_end, now), name))
        elif event == "clear":
            self._play_end = now
            self._pending_marks = [(now, name) for _, name in self._pending_marks]

    async def _echo(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            due = [m for m in self._pending_marks if m[0] <= now]
            self._pending_marks = [m for m in self._pending_marks if m[0] > now]
            for _, name in due:
                try:
                    await self.send(
                        {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}
                    )
                except websockets.ConnectionClosed:
                    return
                self.echoed.append((time.monotonic(), name))

    # ---- what the gateway sent ----

    def of_event(self, event: str) -> list[Outbound]:
        return [r for r in self.received if r.msg.get("event") == event]

    def audio(self, since: float = 0.0, until: float = float("inf")) -> np.ndarray:
        """Decoded 8 kHz PCM16 of the media received in [since, until)."""
        chunks = [
            ulaw_decode(base64.b64decode(r.msg["media"]["payload"]))
            for r in self.of_event("media")
            if since <= r.at < until
        ]
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)

    async def wait_until(self, predicate: Any, timeout: float = 30.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.close_code is not None:
                raise AssertionError(f"stream closed ({self.close_code}) while waiting {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"timed out waiting {what}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
            except TimeoutError:
                pass

    async def wait_media(self, since: float = 0.0, timeout: float = 30.0) -> float:
        await self.wait_until(
            lambda: any(r.at >= since for r in self.of_event("media")), timeout, "for media"
        )
        return next(r.at for r in self.of_event("media") if r.at >= since)

    async def wait_quiet(self, quiet_s: float = 0.6, timeout: float = 40.0) -> None:
        """Until no media has arrived for `quiet_s` (the reply finished)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            media = self.of_event("media")
            if media and time.monotonic() - media[-1].at > quiet_s:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the gateway kept sending media")

    async def wait_closed(self, timeout: float = 20.0) -> int | None:
        await asyncio.wait_for(asyncio.shield(self._tasks[0]), timeout)
        return self.close_code

    async def hang_up(self) -> None:
        for task in self._tasks[1:]:
            task.cancel()
        if self.ws is not None:
            await self.ws.close()
        await asyncio.wait(self._tasks, timeout=5)


def upsample_16k(pcm8k: np.ndarray) -> bytes:
    rs = StreamingResampler(8000, 16000)
    return rs.process(pcm8k.astype("<i2").tobytes()) + rs.flush()


async def transcribe_on(server: ServerThread, pcm8k: np.ndarray) -> str:
    """Transcribe 8 kHz audio with the gateway's own STT (the model is already loaded), after
    300 ms of silence as a live turn has (the turn detector's pre-roll): a clip that opens on
    its first word made tiny.en hear "Hello Alice! Thanks" as "The long- hasn't been"."""
    gw = server.app.state.gw
    pcm = upsample_16k(np.concatenate([np.zeros(2400, dtype="<i2"), pcm8k.astype("<i2")]))

    async def run() -> str:
        stream = gw.voice.stt.open_stream(input_rate=8000)  # as a phone call's stream
        try:
            for i in range(0, len(pcm), 640):
                await stream.push(pcm[i : i + 640])
            return str(await stream.finish())
        finally:
            await stream.aclose()

    return str(await asyncio.to_thread(server.call, run(), 60))


@dataclass
class PhoneGateway:
    server: ServerThread
    llm: FakeLLM
    http: httpx.Client
    redis_url: str | None

    @property
    def webhook_url(self) -> str:
        return f"{self.server.url}/v1/telephony/twilio/voice"

    def agent(self, **body: Any) -> str:
        body.setdefault("model", "openai/fake")
        resp = self.http.post("/v1/agents/", json=body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def webhook(self, agent_id: str, call_sid: str, token: str = TOKEN) -> httpx.Response:
        url = f"{self.webhook_url}?agent_id={agent_id}"
        form = call_form(call_sid)
        return self.http.post(
            url, data=form, headers={"X-Twilio-Signature": sign(url, form, token)}
        )

    def call(self, agent_id: str, call_sid: str = "CA" + "a" * 32) -> TwilioCall:
        """A call placed the way Twilio does it: the signed webhook, then its Stream URL."""
        resp = self.webhook(agent_id, call_sid)
        assert resp.status_code == 200, resp.text
        twiml = parse_twiml(resp.text)
        return TwilioCall(twiml.stream_url, call_sid, twiml.parameters)

    def messages(self, agent_id: str) -> list[dict[str, Any]]:
        return list(
            self.http.get(
                f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 500}
            ).json()
        )

    def transcripts(self, agent_id: str) -> list[dict[str, Any]]:
        """The agent's entries on the Redis transcript stream (docs/sleeptime.md)."""
        import redis

        assert self.redis_url is not None
        client = redis.Redis.from_url(self.redis_url)
        try:
            entries = client.xrange("vg:transcripts")
        finally:
            client.close()
        events = [json.loads(fields[b"event"]) for _, fields in entries]
        return [e for e in events if e["agent_id"] == agent_id]


@contextmanager
def phone_gateway(
    database_url: str, redis_url: str | None, **overrides: Any
) -> Iterator[PhoneGateway]:
    """A live voice gateway (local whisper, espeak) with the Twilio auth token set, the
    loopback fake LLM, and (optionally) Redis as the transcript bus."""
    llm = FakeLLM()
    llm_srv = ServerThread(llm.app).start()
    settings: dict[str, Any] = {
        "voice": True,
        "openai_base_url": f"{llm_srv.url}/v1",
        "openai_api_key": "test",
        "idle_timeout_s": 20.0,
        "twilio_auth_token": TOKEN,
        "redis_url": redis_url,
        "sleeptime_model": "scripted/demo",
    }
    settings.update(overrides)
    try:
        with (
            running_gateway(database_url, **settings) as srv,
            httpx.Client(base_url=srv.url, timeout=30) as http,
        ):
            yield PhoneGateway(srv, llm, http, redis_url)
    finally:
        llm_srv.stop()
