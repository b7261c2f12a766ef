"""An utterance the turn detector ended (pipeline/session.py): its transcript on its way, and
the user turn it becomes once the transcript is there (or nothing: speech the barge-in judge
ignored, an empty transcript, a failed one, which the caller is told about)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from voice_gateway.pipeline.reply import UserTurn
from voice_gateway.pipeline.services import STT_APOLOGY
from voice_gateway.stt.base import STTError

if TYPE_CHECKING:
    from voice_gateway.pipeline.session import VoiceSession

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Utterance:
    transcript: asyncio.Task[str | Exception]
    turn_id: str  # also on the utterance's transcript.partial events
    speech_end_at: float  # monotonic time the caller stopped speaking
    endpoint_at: float  # when the silence made it a turn
    turn_taking: dict[str, Any]  # for turn.metrics: end_of_turn_ms, the verdict
    judge: asyncio.Task[None] | None = None  # speech over a reply: is it an interruption?
    ignored: bool = False  # a backchannel or echo: no turn


async def user_turn(session: VoiceSession, u: Utterance) -> UserTurn | None:
    """The turn `u` becomes (`transcript.final` sent), or None."""
    await asyncio.wait([u.transcript] if u.judge is None else [u.transcript, u.judge])
    if u.transcript.cancelled() or u.ignored:
        return None
    result = u.transcript.result()
    if isinstance(result, Exception):
        exc = result
        if not isinstance(exc, STTError):
            log.error("speech-to-text failed", exc_info=exc)
        provider = exc.provider if isinstance(exc, STTError) else session.voice.stt.name
        session.gw.metrics.provider_error("stt", provider)
        await session.transport.error("stt_error", f"speech-to-text failed: {exc}")
        await session.speak_phrase(STT_APOLOGY)
        return None
    text = result.strip()
    stt_ms = (time.monotonic() - u.endpoint_at) * 1000
    if session.carry_text:
        text, session.carry_text = f"{session.carry_text} {text}".strip(), ""
    if not text:
        return None
    await session.send("transcript.final", turn_id=u.turn_id, text=text)
    return UserTurn(
        text,
        u.turn_id,
        notes=session.take_notes(),
        speech_end_at=u.speech_end_at,
        endpointing_ms=(u.endpoint_at - u.speech_end_at) * 1000,
        stt_ms=stt_ms,
        turn_taking=u.turn_taking,
    )
