"""A test caller for the browser voice socket: real WebSocket, real-time paced audio."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support.speech import frames


@dataclass
class Received:
    at: float
    event: dict[str, Any]


@dataclass
class VoiceClient:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Received] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    audio_frames: list[tuple[float, int]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""
    ws: ClientConnection | None = None
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self) -> VoiceClient:
        self.ws = await websockets.connect(
            self.url, additional_headers=self.headers, max_size=2**22, compression=None
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            async for msg in self.ws:
                now = time.monotonic()
                if isinstance(msg, bytes):
                    self.audio += msg
                    self.audio_frames.append((now, len(msg)))
                else:
                    self.events.append(Received(now, json.loads(msg)))
                self._changed.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            if self.ws.close_code is not None:
                self.close_code = self.ws.close_code
                self.close_reason = self.ws.close_reason or ""
            self._changed.set()

    async def send(self, event: dict[str, Any]) -> None:
        assert self.ws is not None
        await self.ws.send(json.dumps(event))

    async def start(
        self,
        input_rate: int = 16000,
        output_rate: int = 16000,
        conversation_id: str | None = None,
        caller: str | None = None,
    ) -> dict[str, Any]:
        await self.start_nowait(input_rate, output_rate, conversation_id, caller)
        return await self.wait_for("session.started")

    async def start_nowait(
        self,
        input_rate: int = 16000,
        output_rate: int = 16000,
        conversation_id: str | None = None,
        caller: str | None = None,
    ) -> None:
        """Send session.start (with `caller` only if given) without waiting for the answer."""
        event: dict[str, Any] = {
            "type": "session.start",
            "input_audio": {"encoding": "pcm16", "sample_rate": input_rate},
            "output_audio": {"encoding": "pcm16", "sample_rate": output_rate},
            "conversation_id": conversation_id,
        }
        if caller is not None:
            event["caller"] = caller
        await self.send(event)

    async def stream(
        self, pcm: np.ndarray, rate: int, *, realtime: bool = True, frame_ms: int = 20
    ) -> None:
        assert self.ws is not None
        start = time.monotonic()
        for i, frame in enumerate(frames(pcm, rate, frame_ms)):
            if realtime:
                delay = start + i * frame_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await self.ws.send(frame)

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [r.event for r in self.events if r.event.get("type") == type_]

    def first_at(self, type_: str) -> float | None:
        return next((r.at for r in self.events if r.event.get("type") == type_), None)

    async def wait_for(
        self, type_: str, timeout: float = 30.0, count: int = 1, **match: Any
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.of_type(type_) if all(e.get(k) == v for k, v in match.items())]
            if len(found) >= count:
                return found[count - 1]
            if self.close_code is not None and self._reader is not None and self._reader.done():
                got = [r.event["type"] for r in self.events]
                raise AssertionError(
                    f"socket closed ({self.close_code} {self.close_reason}) before {type_}; "
                    f"got {got}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no {type_} within {timeout}s; got {[r.event['type'] for r in self.events]}"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def wait_for_any(self, types: tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
        """The first event of any of `types` (already received or arriving within `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r.event for r in self.events if r.event.get("type") in types]
            if found:
                return found[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self._reader is not None and self._reader.done()):
                got = [r.event["type"] for r in self.events]
                raise AssertionError(f"none of {types} (closed: {self.close_code}); got {got}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    async def wait_closed(self, timeout: float = 15.0) -> int | None:
        if self._reader is not None:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.close_code

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await asyncio.wait([self._reader], timeout=5)
