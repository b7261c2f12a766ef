"""OpenAI audio endpoints on loopback, for the real `openai` SDK: /v1/audio/speech (PCM from
espeak-ng at 24 kHz) and /v1/audio/transcriptions (our real whisper on the uploaded WAV).
Switches make either fail, to test provider failures mid-call."""

from __future__ import annotations

import asyncio
import io
import wave
from dataclasses import dataclass, field

import numpy as np
import soxr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.speech import speak


@dataclass
class AudioState:
    fail_speech: bool = False
    fail_transcription: bool = False
    speech_requests: list[dict] = field(default_factory=list)
    transcriptions: list[str] = field(default_factory=list)
    transcription_models: list[str] = field(default_factory=list)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "server_error", "code": None}}, status_code=status
    )


def add_audio_routes(app: Starlette, state: AudioState) -> None:
    async def speech(request: Request) -> Response:
        body = await request.json()
        state.speech_requests.append(body)
        if state.fail_speech:
            return _error(500, "scripted TTS failure")
        if body.get("response_format") != "pcm" or not body.get("input"):
            return _error(400, "response_format must be pcm and input non-empty")
        pcm = await asyncio.to_thread(speak, body["input"], 24000)
        data = pcm.astype("<i2").tobytes()

        async def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(data), 4800):
                yield data[i : i + 4800]

        return StreamingResponse(chunks(), media_type="audio/pcm")

    async def transcriptions(request: Request) -> Response:
        form = await request.form()
        state.transcription_models.append(str(form.get("model")))
        if state.fail_transcription:
            return _error(503, "scripted STT failure")
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            return _error(400, "file is required")
        raw = await upload.read()
        try:
            with wave.open(io.BytesIO(raw)) as w:
                rate, pcm = w.getframerate(), w.readframes(w.getnframes())
        except wave.Error:
            return _error(400, "file is not a WAV")
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        if rate != 16000:
            audio = soxr.resample(audio, rate, 16000)
        from voice_gateway.stt.whisper import transcribe

        text = await asyncio.to_thread(transcribe, audio.astype(np.float32), 2)
        state.transcriptions.append(text)
        return JSONResponse({"text": text})

    app.router.routes.append(Route("/v1/audio/speech", speech, methods=["POST"]))
    app.router.routes.append(Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]))
