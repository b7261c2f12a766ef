"""Per-process voice services: the STT model, the TTS voice, VAD factory, cached phrases, and
what a call reads of the gateway's settings (`VoiceConfig`, one frozen record built at start:
voice_gateway/voice.py `open_voice` builds both from the settings, so a call never reads them)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from voice_gateway.stt.base import STTProvider
from voice_gateway.tts.base import TTSError, TTSProvider
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.model import SmartTurnModel, load_model
from voice_gateway.turns.options import EchoDefault, TurnOptions, turn_options
from voice_gateway.turns.policies import policy_for
from voice_gateway.turns.policy import EndOfTurn
from voice_gateway.vad import create_vad
from voice_gateway.vad.base import VAD

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. Could you say that again?"
STT_APOLOGY = "Sorry, I didn't catch that. Could you say it again?"
COMMON_RATES = (8000, 16000, 24000, 48000)


@dataclass(frozen=True, slots=True)
class VoiceConfig:
    """What a call reads of the gateway's settings, built once at start."""

    turn: TurnConfig  # the gateway's turn-taking (a call's options go over it)
    echo_cancellation: EchoDefault  # VG_ECHO_CANCELLATION
    vad: str  # VG_VAD, VG_VAD_MODE
    vad_mode: int
    idle_timeout_s: float  # a call that sends nothing for this long is closed
    llm_timeout_s: float  # VG_LLM_VOICE_TIMEOUT_S
    barge_in_check_ms: int
    barge_in_max_ms: int
    backchannels: frozenset[str]  # VG_BACKCHANNELS, as phrases (overlap.py `phrase_set`)

    def turn_options(self, source: str, extra: dict[str, Any]) -> tuple[TurnOptions, list[str]]:
        """A call's turn-taking options over the gateway's, and the complaints to send."""
        return turn_options(self.turn, self.echo_cancellation, source, extra)


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
    config: VoiceConfig
    stt: STTProvider
    tts: TTSProvider
    phrases: PhraseCache
    turn_model: SmartTurnModel | None = None
    _turn_model_tried: bool = False

    def new_vad(self) -> VAD:
        return create_vad(self.config.vad, self.config.vad_mode)

    def new_end_of_turn(self, config: TurnConfig) -> EndOfTurn:
        """The call's end-of-turn policy (voice_gateway/turns/policies.py); `smart` or `auto`
        without the model file is the silence rule (load_model warned once, naming the
        package to install). The model is loaded for the first call that needs it."""
        if config.detection != "vad" and not self._turn_model_tried:
            self._turn_model_tried = True
            self.turn_model = load_model(config)
        return policy_for(config, self.turn_model, busy=lambda: self.stt.backlog() > 0)

    async def aclose(self) -> None:
        if self.turn_model is not None:
            self.turn_model.close()
        await self.stt.aclose()
        await self.tts.aclose()
        if self.phrases.fallback is not None:
            await self.phrases.fallback.aclose()
