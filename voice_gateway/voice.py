"""The gateway's voice at start (VG_VOICE): the speech services and the config a call reads
(voice_gateway/pipeline/services.py `VoiceServices`, `VoiceConfig`), built from the settings
once, so nothing in a call reads the settings."""

from __future__ import annotations

import logging

from agents.voice import DEFAULT_FILLER
from voice_gateway.pipeline.overlap import phrase_set
from voice_gateway.pipeline.services import (
    APOLOGY,
    STT_APOLOGY,
    PhraseCache,
    VoiceConfig,
    VoiceServices,
)
from voice_gateway.provider_check import check_provider_settings
from voice_gateway.settings import Settings
from voice_gateway.stt import create_stt
from voice_gateway.stt.base import STTProvider
from voice_gateway.stt.fallback import FallbackSTT
from voice_gateway.tts import create_tts
from voice_gateway.tts.base import TTSProvider
from voice_gateway.tts.fallback import FallbackTTS
from voice_gateway.turns.config import TurnConfig

log = logging.getLogger(__name__)


def voice_config(settings: Settings) -> VoiceConfig:
    return VoiceConfig(
        turn=TurnConfig.from_settings(settings),
        echo_cancellation=settings.echo_cancellation,
        vad=settings.vad,
        vad_mode=settings.vad_mode,
        idle_timeout_s=settings.idle_timeout_s,
        llm_timeout_s=settings.llm_voice_timeout_s,
        barge_in_check_ms=settings.barge_in_check_ms,
        barge_in_max_ms=settings.barge_in_max_ms,
        backchannels=phrase_set(settings.backchannels),
    )


async def open_voice(settings: Settings) -> VoiceServices:
    """The providers checked, built and warmed up (the cached phrases synthesized, the
    end-of-turn model loaded unless the policy is `vad`)."""
    check_provider_settings(settings)
    stt = _stt(settings, settings.stt)
    if settings.stt_fallback and settings.stt_fallback != settings.stt:
        backup = _stt(settings, settings.stt_fallback)
        stt = FallbackSTT(stt, backup, cooldown_s=settings.fallback_cooldown_s)
    tts = _tts(settings, settings.tts)
    if settings.tts_fallback and settings.tts_fallback != settings.tts:
        voice = _tts(settings, settings.tts_fallback)
        tts = FallbackTTS(tts, voice, cooldown_s=settings.fallback_cooldown_s)
    fallback = None if settings.tts == "espeak" else create_tts("espeak")  # en-us
    phrases = PhraseCache(tts, fallback)
    log.info("loading speech models (stt=%s, tts=%s) ...", settings.stt, settings.tts)
    await stt.warmup()
    await tts.warmup()
    await phrases.warm((DEFAULT_FILLER, APOLOGY, STT_APOLOGY))
    services = VoiceServices(voice_config(settings), stt=stt, tts=tts, phrases=phrases)
    if settings.turn_detection != "vad":  # load (or warn) at start, not on a first call
        services.new_end_of_turn(services.config.turn)
    log.info("speech models ready")
    return services


def _stt(settings: Settings, name: str) -> STTProvider:
    stt = create_stt(
        name,
        threads=settings.stt_threads,
        workers=settings.stt_workers,
        partials=settings.stt_partials,
        openai_model=settings.openai_stt_model,
        deepgram_model=settings.deepgram_stt_model,
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_stt_url,
        deepgram_api_key=settings.deepgram_api_key,
        deepgram_base_url=settings.deepgram_base_url,
    )
    stt.timeout_s = settings.stt_timeout_s
    return stt


def _tts(settings: Settings, name: str) -> TTSProvider:
    tts = create_tts(
        name,
        espeak_voice=settings.espeak_voice_name,
        piper_voice=settings.piper_voice,
        openai_voice=settings.openai_tts_voice_name,
        openai_model=settings.openai_tts_model,
        deepgram_voice=settings.deepgram_tts_voice,
        openai_api_key=settings.openai_api_key,
        openai_base_url=settings.openai_base_url,
        deepgram_api_key=settings.deepgram_api_key,
        deepgram_base_url=settings.deepgram_base_url,
    )
    tts.timeout_s = settings.tts_timeout_s
    return tts
