"""What a call says and leaves behind around its end: cached phrases (an apology, the drain's
goodbye) as audio items of their own, calls still waiting for an approval refused (nothing
runs), and the call-end transcript event that makes the caller's sleeptime rewrite due."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from agents.approvals import Answer
from memory.models import Source, TranscriptEvent
from memory.orm import new_id, utcnow

log = logging.getLogger(__name__)


async def speak_cached(call: Any, voice: Any, text: str) -> str | None:
    """Play `voice.phrases`' audio of `text` on `call` (its send, send_audio, output_rate) as
    one item; its id, or None if it could not be synthesized. Never raises."""
    try:
        audio = await voice.phrases.get(text, call.output_rate)
    except Exception:
        log.exception("no audio for the phrase %r", text)
        return None
    item = new_id("item")
    rate = call.output_rate
    await call.send("response.audio.started", item_id=item, sample_rate=rate)
    step = rate // 50 * 2
    for i in range(0, len(audio), step):
        await call.send_audio(item, audio[i : i + step])
    await call.send("response.audio.done", item_id=item, duration_ms=len(audio) * 500 // rate)
    return item


async def refuse_waiting(
    gw: Any, agent_id: str, conversation_id: str | None, source: Source, answers: list[Answer]
) -> None:
    """The call ended while calls waited: the loop refuses them (nothing runs)."""
    if not answers:
        return
    from agents.loop import TurnInput
    from agents.voice import VOICE

    inp = TurnInput(
        text="",
        mode=VOICE,
        conversation_id=conversation_id,
        source=source,
        publish=False,
        answers=answers,
        answers_only=True,
    )
    try:
        async with contextlib.aclosing(gw.loop.run(agent_id, inp)) as events:
            async for _ in events:
                pass
    except Exception:
        log.exception("could not refuse the calls waiting at hang-up")


async def publish_call_end(call: Any) -> None:
    """The `call_ended` transcript event (empty texts) of `call` (a VoiceSession), stored like
    a turn's."""
    now = utcnow()
    event = TranscriptEvent(
        event_id=new_id("evt"),
        agent_id=call.agent_id,
        conversation_id=call.conversation_id,
        identity_id=call.identity_id,
        turn_id=f"end-{call.session_id}",
        source=call.source,
        user_text="",
        agent_text="",
        agent_text_heard="",
        started_at=now,
        ended_at=now,
        call_ended=True,
    )
    try:
        await asyncio.shield(call.gw.memory.finish_turn(event))
    except Exception:
        log.exception("could not publish the end of the call")
