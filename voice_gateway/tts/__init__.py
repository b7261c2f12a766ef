"""TTS factory: espeak (default), piper, openai, deepgram, and providers registered by name
(`register_tts`, e.g. a benchmark's instant TTS selected with VG_TTS)."""

from __future__ import annotations

from collections.abc import Callable

from voice_gateway.tts.base import TTSError, TTSProvider

KNOWN_TTS = ("espeak", "piper", "openai", "deepgram")
_REGISTERED: dict[str, Callable[[], TTSProvider]] = {}


def register_tts(name: str, factory: Callable[[], TTSProvider]) -> None:
    """Make `factory` selectable as VG_TTS=<name> in this process."""
    _REGISTERED[name] = factory


def create_tts(
    name: str,
    *,
    espeak_voice: str = "en-us",
    piper_voice: str = "joe-us",
    openai_voice: str = "alloy",
    openai_model: str = "gpt-4o-mini-tts",
    deepgram_voice: str = "aura-2-thalia-en",
    openai_api_key: str | None = None,
    openai_base_url: str | None = None,
    deepgram_api_key: str | None = None,
    deepgram_base_url: str | None = None,
) -> TTSProvider:
    if name in _REGISTERED:
        return _REGISTERED[name]()
    if name == "espeak":
        from voice_gateway.tts.espeak import EspeakTTS

        return EspeakTTS(espeak_voice)
    if name == "piper":
        from voice_gateway.tts.piper import PiperTTS

        return PiperTTS(piper_voice)
    if name == "openai":
        from voice_gateway.tts.openai import OpenAITTS

        return OpenAITTS(
            api_key=openai_api_key, base_url=openai_base_url, voice=openai_voice, model=openai_model
        )
    if name == "deepgram":
        from voice_gateway.tts.deepgram import DeepgramTTS

        return DeepgramTTS(
            api_key=deepgram_api_key, base_url=deepgram_base_url, model=deepgram_voice
        )
    known = ", ".join((*KNOWN_TTS, *_REGISTERED))
    raise ValueError(f"unknown TTS {name!r}; known: {known}")


__all__ = ["KNOWN_TTS", "TTSError", "TTSProvider", "create_tts", "register_tts"]
