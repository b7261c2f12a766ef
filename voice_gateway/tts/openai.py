"""OpenAI audio.speech, response_format pcm (24 kHz PCM16), streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator

from openai import AsyncOpenAI

from voice_gateway.tts.base import TTSProvider


class OpenAITTS(TTSProvider):
    name = "openai"
    native_rate = 24000
    streams_audio = True

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        voice: str = "alloy",
        model: str = "gpt-4o-mini-tts",
    ) -> None:
        super().__init__()
        self.voice = voice
        self.model = model
        self.client = AsyncOpenAI(api_key=api_key or "not-needed", base_url=base_url, max_retries=0)

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        async with self.client.audio.speech.with_streaming_response.create(
            model=self.model,
            voice=self.voice,
            input=text,
            response_format="pcm",
        ) as resp:
            async for chunk in resp.iter_bytes(4800):
                yield chunk

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        await self.client.close()
