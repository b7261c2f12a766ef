"""STT factory: whisper (local, default), deepgram, openai, and providers registered by name
(`register_stt`, e.g. a benchmark's instant STT selected with VG_STT)."""

from __future__ import annotations

from collections.abc import Callable

from voice_gateway.stt.base import STTError, STTProvider, STTStream

KNOWN_STT = ("whisper", "deepgram", "openai")
_REGISTERED: dict[str, Callable[[], STTProvider]] = {}


def register_stt(name: str, factory: Callable[[], STTProvider]) -> None:
    """Make `factory` selectable as VG_STT=<name> in this process."""
    _REGISTERED[name] = factory


def create_stt(
    name: str,
    *,
    threads: int = 1,
    workers: int = 2,
    partials: bool = False,
    openai_model: str = "gpt-4o-mini-transcribe",
    deepgram_model: str = "nova-3",
    openai_api_key: str | None = None,
    openai_base_url: str | None = None,
    deepgram_api_key: str | None = None,
    deepgram_base_url: str | None = None,
) -> STTProvider:
    if name in _REGISTERED:
        return _REGISTERED[name]()
    if name == "whisper":
        from voice_gateway.stt.whisper import WhisperSTT

        return WhisperSTT(threads=threads, partials=partials, workers=workers)
    if name == "deepgram":
        from voice_gateway.stt.deepgram import DeepgramSTT

        return DeepgramSTT(
            api_key=deepgram_api_key, base_url=deepgram_base_url, model=deepgram_model
        )
    if name == "openai":
        from voice_gateway.stt.openai import OpenAISTT

        return OpenAISTT(api_key=openai_api_key, base_url=openai_base_url, model=openai_model)
    known = ", ".join((*KNOWN_STT, *_REGISTERED))
    raise ValueError(f"unknown STT {name!r}; known: {known}")


__all__ = ["KNOWN_STT", "STTError", "STTProvider", "STTStream", "create_stt", "register_stt"]
