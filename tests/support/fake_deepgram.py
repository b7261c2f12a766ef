"""A loopback Deepgram for the real deepgram-sdk (reached through DeepgramClientEnvironment).

`/v1/listen` speaks the live-transcription schema: Results (interim and final, with start,
duration, is_final, speech_final, from_finalize, words), SpeechStarted (vad_events),
UtteranceEnd (utterance_end_ms), Metadata on CloseStream; it honours KeepAlive and Finalize,
endpoints after `endpointing` ms of silence (webrtcvad), and transcribes the audio it got with
our local whisper model, so transcripts are real. `/v1/speak` speaks Aura's schema: Speak,
Flush -> binary linear16 audio (espeak-ng at the requested rate) then Flushed; Clear ->
Cleared; Close. Switches drop sockets mid-stream and reject keys, for failure tests."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import webrtcvad
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.speech import speak

API_KEY = "dg-test-key"
MODEL_INFO = {"name": "general-nova-3", "version": "2025-01-01.0", "arch": "nova-3"}


def whisper_text(pcm: bytes) -> str:
    from voice_gateway.stt.whisper import transcribe

    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    return transcribe(audio, 2) if len(audio) >= 1600 else ""


@dataclass
class DeepgramState:
    api_key: str = API_KEY
    interim_every_ms: int = 800
    drop_listen_after_ms: int | None = None  # close the next listen socket (1011) after this
    fail_speak: bool = False  # close speak sockets (1011) instead of audio
    warn_speak: bool = False  # answer Flush with a Warning
    ignore_finalize: bool = False  # Deepgram "may" answer Finalize: test the other path
    listen_connections: int = 0
    speak_connections: int = 0
    listen_params: list[dict[str, str]] = field(default_factory=list)
    speak_params: list[dict[str, str]] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    finals: list[str] = field(default_factory=list)
    spoken: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # client JSON message types, in order
    audio_ms: float = 0.0

    def count(self, kind: str) -> int:
        return self.messages.count(kind)


def _results(
    text: str, start: float, end: float, *, final: bool, speech_final: bool, from_finalize: bool
) -> dict[str, Any]:
    words = text.split()
    step = (end - start) / max(1, len(words))
    return {
        "type": "Results",
        "channel_index": [0, 1],
        "duration": round(end - start, 4),
        "start": round(start, 4),
        "is_final": final,
        "speech_final": speech_final,
        "from_finalize": from_finalize,
        "channel": {
            "alternatives": [
                {
                    "transcript": text,
                    "confidence": 0.98 if text else 0.0,
                    "words": [
                        {
                            "word": w.strip(".,!?").lower(),
                            "start": round(start + i * step, 3),
                            "end": round(start + (i + 1) * step, 3),
                            "confidence": 0.98,
                            "punctuated_word": w,
                        }
                        for i, w in enumerate(words)
                    ],
                }
            ]
        },
        "metadata": {
            "request_id": str(uuid.uuid4()),
            "model_info": MODEL_INFO,
            "model_uuid": str(uuid.uuid4()),
        },
    }


class _Listen:
    """One live-transcription socket: audio timeline, VAD, endpointing, finals."""

    def __init__(self, ws: WebSocket, state: DeepgramState, params: dict[str, str]) -> None:
        self.ws, self.state, self.params = ws, state, params
        self.rate = int(params.get("sample_rate", "16000"))
        self.bps = self.rate * 2
        self.audio = bytearray()
        self.final_upto = 0  # bytes finalized
        self.interim_at = 0
        self.vad = webrtcvad.Vad(3)
        self.frame = self.rate // 50 * 2
        self.scanned = 0
        self.in_speech = False
        self.silence_ms = 0
        self.last_word_end: float | None = None
        self.id = str(uuid.uuid4())

    def t(self, n_bytes: int) -> float:
        return n_bytes / self.bps

    async def send(self, event: dict[str, Any]) -> None:
        await self.ws.send_text(json.dumps(event))

    async def final(self, *, speech_final: bool, from_finalize: bool) -> None:
        seg = bytes(self.audio[self.final_upto :])
        text = await asyncio.to_thread(whisper_text, seg) if seg else ""
        start, end = self.t(self.final_upto), self.t(len(self.audio))
        self.final_upto = self.interim_at = len(self.audio)
        if text:
            self.state.finals.append(text)
            self.last_word_end = end
        await self.send(
            _results(
                text,
                start,
                end,
                final=True,
                speech_final=speech_final,
                from_finalize=from_finalize,
            )
        )

    async def audio_in(self, data: bytes) -> None:
        self.audio += data
        self.state.audio_ms += len(data) / self.bps * 1000
        endpointing = int(self.params.get("endpointing", "10"))
        while self.scanned + self.frame <= len(self.audio):
            frame = bytes(self.audio[self.scanned : self.scanned + self.frame])
            self.scanned += self.frame
            voiced = self.vad.is_speech(frame, self.rate)
            if voiced and not self.in_speech:
                self.in_speech, self.silence_ms = True, 0
                if self.params.get("vad_events") == "true":
                    ts = self.t(self.scanned - self.frame)
                    await self.send({"type": "SpeechStarted", "channel": [0, 1], "timestamp": ts})
            elif voiced:
                self.silence_ms = 0
            else:
                self.silence_ms += 20
                await self._silence(endpointing)
        if (
            self.in_speech
            and self.params.get("interim_results") == "true"
            and len(self.audio) - self.interim_at >= self.state.interim_every_ms * self.bps // 1000
        ):
            self.interim_at = len(self.audio)
            seg = bytes(self.audio[self.final_upto :])
            text = await asyncio.to_thread(whisper_text, seg)
            start, end = self.t(self.final_upto), self.t(len(self.audio))
            await self.send(
                _results(text, start, end, final=False, speech_final=False, from_finalize=False)
            )

    async def _silence(self, endpointing: int) -> None:
        if self.in_speech and self.silence_ms >= endpointing:
            self.in_speech = False
            await self.final(speech_final=True, from_finalize=False)
        end_ms = int(self.params.get("utterance_end_ms", "0") or 0)
        if end_ms and self.last_word_end is not None and self.silence_ms >= end_ms:
            await self.send(
                {"type": "UtteranceEnd", "channel": [0, 1], "last_word_end": self.last_word_end}
            )
            self.last_word_end = None

    async def control(self, msg: dict[str, Any]) -> bool:
        """A JSON message from the client; False when the socket should close."""
        kind = str(msg.get("type"))
        self.state.messages.append(kind)
        if kind == "Finalize":
            if (
                len(self.audio) > self.final_upto and not self.state.ignore_finalize
            ):  # as documented: only when audio is pending
                await self.final(speech_final=False, from_finalize=True)
        elif kind == "CloseStream":
            await self.send(
                {
                    "type": "Metadata",
                    "transaction_key": "deprecated",
                    "request_id": self.id,
                    "sha256": "0" * 64,
                    "created": "2026-01-01T00:00:00.000Z",
                    "duration": self.t(len(self.audio)),
                    "channels": 1,
                }
            )
            return False
        return True


class FakeDeepgram:
    def __init__(self) -> None:
        self.state = DeepgramState()
        self.app = Starlette(
            routes=[
                WebSocketRoute("/v1/listen", self.listen),
                WebSocketRoute("/v1/speak", self.speak),
            ]
        )

    def reset(self) -> DeepgramState:
        self.state = DeepgramState()
        return self.state

    async def _authorized(self, ws: WebSocket) -> bool:
        header = ws.headers.get("authorization", "")
        self.state.auth_headers.append(header)
        if header == f"Token {self.state.api_key}":
            return True
        body = {"err_code": "INVALID_AUTH", "err_msg": "Invalid credentials.", "request_id": "x"}
        await ws.send_denial_response(JSONResponse(body, status_code=401))
        return False

    async def listen(self, ws: WebSocket) -> None:
        if not await self._authorized(ws):
            return
        params = dict(ws.query_params)
        self.state.listen_params.append(params)
        self.state.listen_connections += 1
        await ws.accept()
        session = _Listen(ws, self.state, params)
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                if msg.get("bytes") is not None:
                    await session.audio_in(msg["bytes"])
                    drop = self.state.drop_listen_after_ms
                    if drop is not None and len(session.audio) / session.bps * 1000 >= drop:
                        self.state.drop_listen_after_ms = None
                        await ws.close(1011, "NET-0001: scripted drop")
                        return
                elif not await session.control(json.loads(msg.get("text") or "{}")):
                    await ws.close(1000)
                    return
        except (WebSocketDisconnect, RuntimeError):
            return

    async def speak(self, ws: WebSocket) -> None:
        if not await self._authorized(ws):
            return
        rate = int(ws.query_params.get("sample_rate", "24000"))
        self.state.speak_params.append(dict(ws.query_params))
        self.state.speak_connections += 1
        await ws.accept()
        await ws.send_text(
            json.dumps(
                {
                    "type": "Metadata",
                    "request_id": str(uuid.uuid4()),
                    "model_name": ws.query_params.get("model", "aura-2-thalia-en"),
                    "model_version": "2025-01-01.0",
                    "model_uuid": str(uuid.uuid4()),
                }
            )
        )
        text, seq = "", 0
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                data = json.loads(msg.get("text") or "{}")
                kind = data.get("type")
                self.state.messages.append(f"speak:{kind}")
                if kind == "Speak":
                    text += str(data.get("text", ""))
                elif kind == "Flush":
                    if self.state.fail_speak:
                        await ws.close(1011, "scripted failure")
                        return
                    if self.state.warn_speak:
                        warning = {"type": "Warning", "description": "scripted", "code": "W1"}
                        await ws.send_text(json.dumps(warning))
                        continue
                    self.state.spoken.append(text)
                    pcm = (await asyncio.to_thread(speak, text, rate)).astype("<i2").tobytes()
                    for i in range(0, len(pcm), 4800):
                        await ws.send_bytes(pcm[i : i + 4800])
                    text, seq = "", seq + 1
                    await ws.send_text(json.dumps({"type": "Flushed", "sequence_id": seq}))
                elif kind == "Clear":
                    text = ""
                    await ws.send_text(json.dumps({"type": "Cleared", "sequence_id": seq}))
                elif kind == "Close":
                    await ws.close(1000)
                    return
        except (WebSocketDisconnect, RuntimeError):
            return
