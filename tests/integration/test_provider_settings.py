"""Provider settings mean one thing each: every vendor option has its own
VG_ setting, an unknown value (where the vendor publishes its list) stops the gateway at start
with a message naming the setting, OpenAI STT has its own base URL, and the deprecated
VG_TTS_VOICE still works with a warning."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from starlette.applications import Starlette

from tests.support.fake_openai_audio import AudioState, add_audio_routes
from tests.support.gateway_proc import ROOT, base_env, vg_command
from tests.support.servers import serve
from tests.support.speech import silence, speak
from voice_gateway.provider_check import (
    ProviderSettingError,
    check_provider_settings,
    deepgram_tts_voices,
    espeak_voices,
    openai_tts_voices,
)
from voice_gateway.settings import Settings
from voice_gateway.voice import _stt, _tts

BAD = [
    ({"VG_TTS": "espeak", "VG_ESPEAK_VOICE": "elvish"}, "VG_ESPEAK_VOICE"),
    ({"VG_TTS": "espeak", "VG_ESPEAK_VOICE": "en-us+nosuchvariant"}, "VG_ESPEAK_VOICE"),
    ({"VG_TTS": "piper", "VG_PIPER_VOICE": "/nowhere/voice.onnx"}, "VG_PIPER_VOICE"),
    ({"VG_TTS": "openai", "VG_OPENAI_TTS_VOICE": "en-us"}, "VG_OPENAI_TTS_VOICE"),
    ({"VG_TTS": "openai", "VG_OPENAI_TTS_MODEL": "tts-9"}, "VG_OPENAI_TTS_MODEL"),
    ({"VG_STT": "openai", "VG_OPENAI_STT_MODEL": "whisper-9"}, "VG_OPENAI_STT_MODEL"),
    ({"VG_STT": "deepgram", "VG_DEEPGRAM_STT_MODEL": "nova-9"}, "VG_DEEPGRAM_STT_MODEL"),
    ({"VG_TTS": "deepgram", "VG_DEEPGRAM_TTS_VOICE": "aura-2-hal-en"}, "VG_DEEPGRAM_TTS_VOICE"),
    # a fallback provider is checked as well
    ({"VG_TTS_FALLBACK": "openai", "VG_OPENAI_TTS_VOICE": "x"}, "VG_OPENAI_TTS_VOICE"),
]


def env_settings(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> Settings:
    for key in list(os.environ):
        if key.startswith("VG_") or key in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
            monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return Settings()


@pytest.mark.parametrize(("env", "setting"), BAD)
def test_an_unknown_value_names_its_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], setting: str
) -> None:
    with pytest.raises(ProviderSettingError, match=setting):
        check_provider_settings(env_settings(monkeypatch, env))


def test_published_values_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    assert {"alloy", "nova", "cedar"} <= set(openai_tts_voices())
    assert "aura-2-thalia-en" in deepgram_tts_voices()
    assert {"en-us", "en-gb", "mb-en1", "en"} & espeak_voices() == {"en-us", "en-gb", "en"}
    good = {
        "VG_TTS": "openai", "VG_TTS_FALLBACK": "espeak", "VG_STT": "openai",
        "VG_STT_FALLBACK": "deepgram", "VG_ESPEAK_VOICE": "en-gb+f3",
        "VG_OPENAI_TTS_VOICE": "cedar", "VG_OPENAI_TTS_MODEL": "tts-1",
        "VG_OPENAI_STT_MODEL": "whisper-1", "VG_DEEPGRAM_STT_MODEL": "nova-2",
        "VG_DEEPGRAM_TTS_VOICE": "aura-2-apollo-en",
    }  # fmt: skip
    check_provider_settings(env_settings(monkeypatch, good))
    # Deepgram TTS voice when selected
    check_provider_settings(env_settings(monkeypatch, {"VG_TTS": "deepgram"}))


def test_own_openai_compatible_server_is_not_held_to_openai_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"VG_TTS": "openai", "VG_OPENAI_TTS_VOICE": "af_bella", "VG_STT": "openai",
           "VG_OPENAI_STT_MODEL": "Systran/faster-whisper-small",
           "OPENAI_BASE_URL": "http://127.0.0.1:8880/v1"}  # fmt: skip
    check_provider_settings(env_settings(monkeypatch, env))
    # the STT base URL is its own: pointed at OpenAI, its model is checked again
    env["VG_OPENAI_STT_BASE_URL"] = "https://api.openai.com/v1"
    with pytest.raises(ProviderSettingError, match="VG_OPENAI_STT_MODEL"):
        check_provider_settings(env_settings(monkeypatch, env))


def test_deprecated_tts_voice_still_works_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = env_settings(monkeypatch, {"VG_TTS": "espeak", "VG_TTS_VOICE": "en-gb"})
    with caplog.at_level(logging.WARNING):
        check_provider_settings(s)
    assert "VG_TTS_VOICE is deprecated" in caplog.text
    assert s.espeak_voice_name == "en-gb"
    assert _tts(s, "espeak").voice == "en-gb"  # type: ignore[attr-defined]
    # as before: an OpenAI voice name reaches OpenAI, an espeak "en..." name means alloy
    assert env_settings(monkeypatch, {"VG_TTS_VOICE": "nova"}).openai_tts_voice_name == "nova"
    assert s.openai_tts_voice_name == "alloy"
    # the new setting wins, and an unknown deprecated value is reported under its own name
    s = env_settings(monkeypatch, {"VG_TTS_VOICE": "en-gb", "VG_ESPEAK_VOICE": "en-us"})
    assert s.espeak_voice_name == "en-us"
    with pytest.raises(ProviderSettingError, match="VG_TTS_VOICE"):
        check_provider_settings(env_settings(monkeypatch, {"VG_TTS_VOICE": "zz-nothing"}))


async def test_each_openai_setting_reaches_the_vendor_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TTS talks to OPENAI_BASE_URL with its voice and model; STT to VG_OPENAI_STT_BASE_URL
    (a different server) with its own model."""
    llm_side, stt_side = AudioState(), AudioState()
    llm_app, stt_app = Starlette(), Starlette()
    add_audio_routes(llm_app, llm_side)
    add_audio_routes(stt_app, stt_side)
    with serve(llm_app) as llm_srv, serve(stt_app) as stt_srv:
        s = env_settings(monkeypatch, {
            "VG_TTS": "openai", "VG_STT": "openai", "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": f"{llm_srv.url}/v1", "VG_OPENAI_STT_BASE_URL": f"{stt_srv.url}/v1",
            "VG_OPENAI_TTS_VOICE": "coral", "VG_OPENAI_TTS_MODEL": "tts-1-hd",
            "VG_OPENAI_STT_MODEL": "whisper-1",
        })  # fmt: skip
        tts, stt = _tts(s, "openai"), _stt(s, "openai")
        try:
            pcm = await tts.synthesize_all("Testing one two three.", 16000)
            assert len(pcm) > 16000
            stream = stt.open_stream(input_rate=16000)
            audio = np.concatenate([speak("My name is Grace.", 16000), silence(300, 16000)])
            await stream.feed(audio.astype("<i2").tobytes())
            text = await stream.finish()
            await stream.aclose()
        finally:
            await tts.aclose()
            await stt.aclose()
    assert [(r["voice"], r["model"]) for r in llm_side.speech_requests] == [("coral", "tts-1-hd")]
    assert llm_side.transcription_models == [] and stt_side.speech_requests == []
    assert stt_side.transcription_models == ["whisper-1"]
    assert "grace" in text.lower()


def test_serve_refuses_to_start_with_an_unknown_voice(tmp_path: Path) -> None:
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_TTS="openai",
        VG_OPENAI_TTS_VOICE="robot",
        VG_PORT="1",
    )
    res = subprocess.run(
        vg_command("serve"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0
    assert "VG_OPENAI_TTS_VOICE='robot' is not an OpenAI TTS voice" in res.stderr, res.stderr
    assert "alloy" in res.stderr and "Traceback" not in res.stderr
