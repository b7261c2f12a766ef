"""A WebRTC caller on aiortc: what `voice-gateway call --webrtc`, the tests and the benchmarks
use to call an agent without a browser. Microphone audio is pushed as PCM16 and sent in real
time on an Opus track; reply audio is kept as 16 kHz PCM16; the `events` data channel carries
the voice socket's JSON events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import soxr
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from voice_gateway.webrtc.ice import IceConfig, pin
from voice_gateway.webrtc.media import OUT_RATE, Downmix, ReplyTrack

REPLY_RATE = 16000  # the rate the caller keeps reply audio at


@dataclass
class Event:
    at: float  # monotonic time of arrival
    event: dict[str, Any]


@dataclass
class WebRTCCaller:
    base_url: str  # http://127.0.0.1:PORT
    agent_id: str
    headers: dict[str, str] = field(default_factory=dict)
    session_token: str | None = None
    host_addresses: tuple[str, ...] = ("127.0.0.1",)
    events: list[Event] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)  # reply audio, 16 kHz PCM16
    audio_frames: list[tuple[float, float]] = field(default_factory=list)  # (at, rms) per frame
    answer: dict[str, Any] = field(default_factory=dict)
    location: str | None = None
    pc: RTCPeerConnection | None = None
    mic: ReplyTrack = field(default_factory=ReplyTrack)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _channel_open: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    async def connect(self, start: dict[str, Any] | None = None, open_s: float = 20) -> None:
        """Offer, get the answer, wait for the data channel, send `session.start`."""
        pc = self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver(self.mic, direction="sendrecv")
        channel = pc.createDataChannel("events")
        self.channel = channel
        channel.on("open", self._channel_open.set)
        channel.on("message", self._on_message)
        channel.on("close", self._on_close)
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        pin(pc, IceConfig(host_addresses=self.host_addresses))
        await pc.setLocalDescription(await pc.createOffer())
        params = {"session_token": self.session_token} if self.session_token else None
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as http:
            resp = await http.post(
                f"/v1/agents/{self.agent_id}/webrtc",
                json={"type": "offer", "sdp": pc.localDescription.sdp},
                headers=self.headers,
                params=params,
            )
        if resp.status_code != 201:
            await self.close()
            raise RuntimeError(f"offer refused: {resp.status_code} {resp.text}")
        self.answer = resp.json()
        self.location = self.answer["location"]
        await pc.setRemoteDescription(RTCSessionDescription(self.answer["sdp"], "answer"))
        await asyncio.wait_for(self._channel_open.wait(), open_s)
        self.send(start or {"type": "session.start"})

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, str):
            self.events.append(Event(time.monotonic(), json.loads(message)))
            self._changed.set()

    def _on_close(self) -> None:
        self.closed = True
        self._changed.set()

    def _on_state(self) -> None:
        if self.pc is not None and self.pc.connectionState in ("failed", "closed"):
            self._on_close()

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._tasks.append(asyncio.create_task(self._read_audio(track)))

    async def _read_audio(self, track: MediaStreamTrack) -> None:
        downmix = Downmix(REPLY_RATE)
        with contextlib.suppress(MediaStreamError):
            while True:
                pcm = downmix.pcm(await track.recv())  # type: ignore[arg-type]
                self.audio += pcm
                x = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
                rms = float(np.sqrt(np.mean(x * x))) if len(x) else 0.0
                self.audio_frames.append((time.monotonic(), rms))

    def send(self, event: dict[str, Any] | str) -> None:
        self.channel.send(event if isinstance(event, str) else json.dumps(event))

    def play(self, pcm: np.ndarray | bytes, rate: int) -> float:
        """Queue microphone audio (sent in real time); returns its duration in seconds."""
        x = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes) else pcm
        if rate != OUT_RATE:
            y = soxr.resample(x.astype(np.float32) / 32768.0, rate, OUT_RATE, quality="HQ")
            x = np.clip(y * 32768.0, -32768, 32767).astype(np.int16)
        self.mic.push(x.astype("<i2").tobytes())
        return len(x) / OUT_RATE

    async def play_and_wait(self, pcm: np.ndarray | bytes, rate: int) -> None:
        await asyncio.sleep(self.play(pcm, rate) + 0.05)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [e.event for e in self.events if e.event.get("type") == type_]

    def first_at(self, type_: str) -> float | None:
        return next((e.at for e in self.events if e.event.get("type") == type_), None)

    async def wait_for(
        self,
        type_: str,
        timeout: float = 30.0,  # noqa: ASYNC109 (as tests/support/voice_client.py)
        count: int = 1,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.of_type(type_)
            if len(found) >= count:
                return found[count - 1]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed:
                got = [e.event["type"] for e in self.events]
                why = "call closed" if self.closed else f"no {type_} within {timeout}s"
                raise AssertionError(f"{why} before {type_}; got {got}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    async def hang_up(self) -> httpx.Response:
        assert self.location is not None
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as http:
            return await http.delete(self.location)

    async def close(self) -> None:
        if self.pc is not None:
            await self.pc.close()
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        self._tasks.clear()
