"""Per-process voice services: the STT model, the TTS voice, VAD factory, cached phrases."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from agents.voice import DEFAULT_FILLER
from voice_gateway.provider_check import check_provider_settings
from voice_gateway.settings import Settings
from voice_gateway.stt import create_stt
from voice_gateway.stt.base import STTProvider
from voice_gateway.stt.fallback import FallbackSTT
from voice_gateway.tts import create_tts
from voice_gateway.tts.base import TTSError, TTSProvider
from voice_gateway.tts.fallback import FallbackTTS
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.model import SmartTurnModel, load_model
from voice_gateway.turns.policies import policy_for
from voice_gateway.turns.policy import EndOfTurn
from voice_gateway.vad import create_vad
from voice_gateway.vad.base import VAD

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"
STT_APOLOGY = "Sorry, I didn't catch that. Could you say it again?"
COMMON_RATES = (8000, 16000, 24000, 48000)


@dataclass
class PhraseCache:
    """Pre-synthesized audio per (text, rate): fillers and apologies play with no TTS wait.
    Falls back to espeak-ng when the configured voice fails, so an apology can always play."""

    tts: TTSProvider
    fallback: TTSProvider | None = None
    _audio: dict[tuple[str, int], bytes] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def get(self, text: str, rate: int) -> bytes:
        key = (text, rate)
        if key in self._audio:
            return self._audio[key]
        async with self._lock:
            if key not in self._audio:
                self._audio[key] = await self._synth(text, rate)
            return self._audio[key]

    def cached(self, text: str, rate: int) -> bytes | None:
        return self._audio.get((text, rate))

    async def _synth(self, text: str, rate: int) -> bytes:
        try:
            return await self.tts.synthesize_all(text, rate)
        except TTSError:
            if self.fallback is None:
                raise
            log.warning(
                "phrase synthesis failed with %s; using %s", self.tts.name, self.fallback.name
            )
            return await self.fallback.synthesize_all(text, rate)

    async def warm(self, texts: tuple[str, ...], rates: tuple[int, ...] = COMMON_RATES) -> None:
        for text in texts:
            for rate in rates:
                await self.get(text, rate)


@dataclass
class VoiceServices:
    settings: Settings
    stt: STTProvider
    tts: TTSProvider
    phrases: PhraseCache
    turn_model: SmartTurnModel | None = None
    _turn_model_tried: bool = False

    def new_vad(self) -> VAD:
        return create_vad(self.settings.vad, self.settings.vad_mode)

    def new_end_of_turn(self, config: TurnConfig) -> EndOfTurn:
        """The call's end-of-turn policy (voice_gateway/turns/policies.py); `smart` or `auto`
        without the model file is the silence rule (load_model warned once, naming the
        package to install). The model is loaded for the first call that needs it."""
        if config.detection != "vad" and not self._turn_model_tried:
            self._turn_model_tried = True
            self.turn_model = load_model(config)
        return policy_for(config, self.turn_model, busy=lambda: self.stt.backlog() > 0)

    @classmethod
    async def open(cls, settings: Settings) -> VoiceServices:
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
        services = cls(settings=settings, stt=stt, tts=tts, phrases=phrases)
        if settings.turn_detection != "vad":  # load (or warn) at start, not on a first call
            services.new_end_of_turn(TurnConfig.from_settings(settings))
        log.info("speech models ready")
        return services

    async def aclose(self) -> None:
        if self.turn_model is not None:
            self.turn_model.close()
        await self.stt.aclose()
        await self.tts.aclose()
        if self.phrases.fallback is not None:
            await self.phrases.fallback.aclose()


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
