"""OpenAI transcription per utterance (the utterance is sent as a WAV when it ends)."""

from __future__ import annotations

import io
import wave

import openai
from openai import AsyncOpenAI

from voice_gateway.stt.base import PartialCallback, STTError, STTProvider, STTStream


def wav_bytes(pcm: bytes, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return buf.getvalue()


class OpenAIStream(STTStream):
    provider = "openai"

    def __init__(self, stt: OpenAISTT) -> None:
        super().__init__()
        self.stt = stt
        self._buf = bytearray()

    async def push(self, pcm16_16k: bytes) -> None:
        self.push_now(pcm16_16k)

    def push_now(self, pcm16_16k: bytes) -> bool:
        self._buf += pcm16_16k
        return True

    async def _finish(self) -> str:
        pcm, self._buf = bytes(self._buf), bytearray()
        if len(pcm) < 3200:
            return ""
        try:
            result = await self.stt.client.audio.transcriptions.create(
                model=self.stt.model, file=("speech.wav", wav_bytes(pcm), "audio/wav")
            )
        except openai.OpenAIError as exc:
            raise STTError(self.provider, str(exc), retryable=True) from exc
        return str(getattr(result, "text", "") or "")

    async def reset(self) -> None:
        self._buf = bytearray()


class OpenAISTT(STTProvider):
    name = "openai"

    def __init__(
        self, *, api_key: str | None, base_url: str | None, model: str = "gpt-4o-mini-transcribe"
    ) -> None:
        self.model = model
        self.client = AsyncOpenAI(api_key=api_key or "not-needed", base_url=base_url, max_retries=1)

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return OpenAIStream(self)

    async def aclose(self) -> None:
        await self.client.close()
