"""Start-up check of the provider settings against what each vendor publishes.

Each VG_* provider option means one thing (settings.py). Where the vendor publishes its list,
an unknown value stops the gateway at start with a message naming the setting, instead of
failing on the first call:
- OpenAI TTS voices and models, OpenAI transcription models: the Literal lists of the `openai`
  SDK's request types (checked only against OpenAI itself: an OpenAI-compatible server of
  your own, VG_OPENAI_STT_BASE_URL / OPENAI_BASE_URL, has voices and models of its own);
- Deepgram Aura voices and listen models: the Literal lists of the `deepgram-sdk` types;
- espeak-ng voices: `espeak-ng --voices` (a name, language or file, optionally `+variant`
  from `espeak-ng --voices=variant`);
- Piper: the bundled voice `joe-us` or the path of a `.onnx` voice with its `.onnx.json`.
Only the providers selected by VG_STT / VG_TTS (and their fallbacks) are checked.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import typing
from functools import cache
from pathlib import Path
from urllib.parse import urlparse

from voice_gateway.settings import Settings

log = logging.getLogger(__name__)
OPENAI_HOSTS = {"api.openai.com"}


class ProviderSettingError(ValueError):
    """A provider setting has a value the vendor does not publish; the message names it."""


def literal_values(tp: object) -> tuple[str, ...]:
    """Every string of the Literal types inside `tp` (Unions and aliases flattened)."""
    if typing.get_origin(tp) is typing.Literal:
        return tuple(str(v) for v in typing.get_args(tp))
    out: list[str] = []
    for arg in typing.get_args(tp):
        out += literal_values(arg)
    return tuple(dict.fromkeys(out))


def openai_tts_voices() -> tuple[str, ...]:
    from openai.types.audio import speech_create_params

    return literal_values(speech_create_params.__dict__["Voice"])


def openai_tts_models() -> tuple[str, ...]:
    from openai.types.audio.speech_model import SpeechModel

    return literal_values(SpeechModel)


def openai_stt_models() -> tuple[str, ...]:
    from openai.types.audio_model import AudioModel

    return literal_values(AudioModel)


def deepgram_tts_voices() -> tuple[str, ...]:
    from deepgram.types.speak_v1model import SpeakV1Model

    return literal_values(SpeakV1Model)


def deepgram_stt_models() -> tuple[str, ...]:
    from deepgram.types.listen_v1model import ListenV1Model

    return literal_values(ListenV1Model)


@cache
def espeak_voices(kind: str = "") -> frozenset[str]:
    """Names, languages and files of `espeak-ng --voices` (kind "variant": the variants)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        return frozenset()
    arg = f"--voices={kind}" if kind else "--voices"
    out = subprocess.run([exe, arg], capture_output=True, text=True, timeout=10).stdout
    names: set[str] = set()
    for line in out.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5:
            lang, name, file = cols[1], cols[3], cols[4]
            names |= {lang, name, file, file.rsplit("/", 1)[-1]}
            names |= {n.lower() for n in (lang, name, file.rsplit("/", 1)[-1])}
    names.discard("variant")
    return frozenset(names)


def espeak_voice_ok(voice: str) -> bool:
    base, _, variant = voice.partition("+")
    voices = espeak_voices()
    if not voices:  # no espeak-ng binary to ask: the engine reports it on first use
        return True
    return base in voices and (not variant or variant in espeak_voices("variant"))


def _is_openai(url: str | None) -> bool:
    return not url or (urlparse(url).hostname or "") in OPENAI_HOSTS


def _require(setting: str, value: str, known: tuple[str, ...] | frozenset[str], what: str) -> None:
    if value not in known:
        shown = ", ".join(sorted(known)[:60])
        raise ProviderSettingError(f"{setting}={value!r} is not {what}; known: {shown}")


def _check_tts(s: Settings, name: str) -> None:
    if name == "espeak" and not espeak_voice_ok(s.espeak_voice_name):
        setting = "VG_ESPEAK_VOICE" if s.espeak_voice else "VG_TTS_VOICE"
        raise ProviderSettingError(
            f"{setting}={s.espeak_voice_name!r} is not an espeak-ng voice (see "
            "`espeak-ng --voices`, variants: `espeak-ng --voices=variant`)"
        )
    if name == "piper" and s.piper_voice != "joe-us":
        path = Path(s.piper_voice)
        if path.suffix != ".onnx" or not path.is_file() or not Path(f"{path}.json").is_file():
            raise ProviderSettingError(
                f"VG_PIPER_VOICE={s.piper_voice!r} is neither the bundled voice 'joe-us' nor a "
                "Piper .onnx voice file with its .onnx.json beside it"
            )
    if name == "openai" and _is_openai(s.openai_base_url):
        setting = "VG_OPENAI_TTS_VOICE" if s.openai_tts_voice else "VG_TTS_VOICE"
        _require(setting, s.openai_tts_voice_name, openai_tts_voices(), "an OpenAI TTS voice")
        _require("VG_OPENAI_TTS_MODEL", s.openai_tts_model, openai_tts_models(),
                 "an OpenAI speech model")  # fmt: skip
    if name == "deepgram":
        _require("VG_DEEPGRAM_TTS_VOICE", s.deepgram_tts_voice, deepgram_tts_voices(),
                 "a Deepgram Aura voice")  # fmt: skip


def _check_stt(s: Settings, name: str) -> None:
    if name == "openai" and _is_openai(s.openai_stt_url):
        _require("VG_OPENAI_STT_MODEL", s.openai_stt_model, openai_stt_models(),
                 "an OpenAI transcription model")  # fmt: skip
    if name == "deepgram":
        _require("VG_DEEPGRAM_STT_MODEL", s.deepgram_stt_model, deepgram_stt_models(),
                 "a Deepgram listen model")  # fmt: skip


def check_provider_settings(s: Settings) -> None:
    """Raise ProviderSettingError for an unknown voice or model of a selected provider; warn
    once about the deprecated VG_TTS_VOICE."""
    if s.tts_voice is not None:
        log.warning(
            "VG_TTS_VOICE is deprecated and will be removed in the next release: set "
            "VG_ESPEAK_VOICE (espeak-ng) or VG_OPENAI_TTS_VOICE (OpenAI) instead"
        )
    for name in dict.fromkeys((s.tts, s.tts_fallback)):
        if name:
            _check_tts(s, name)
    for name in dict.fromkeys((s.stt, s.stt_fallback)):
        if name:
            _check_stt(s, name)
