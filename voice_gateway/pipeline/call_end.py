"""What a call says and leaves behind around its end: cached phrases (an apology, the drain's
goodbye) as audio items of their own, calls still waiting for an approval refused (nothing
runs), the call-end transcript event that makes the caller's sleeptime rewrite due, and the
wind-down and drain of a call (`Ending`: what they need of it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from agents.approvals import Answer
from memory.ids import new_id, utcnow
from memory.models import Source, TranscriptEvent
from memory.service import Memory
from voice_gateway.pipeline.playout import Playout
from voice_gateway.pipeline.services import PhraseCache, VoiceServices
from voice_gateway.pipeline.transport import CLOSE_RESTART, Transport

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)


class Speaking(Protocol):
    """Where a phrase is played: the call's events and audio, at its output rate."""

    output_rate: int

    async def send(self, type_: str, **fields: Any) -> None: ...

    async def send_audio(self, item_id: str, pcm: bytes) -> None: ...


class Ending(Protocol):
    """A call as its wind-down and drain act on it (VoiceSession)."""

    transport: Transport
    voice: VoiceServices
    output_rate: int
    ended: asyncio.Event  # run() returned
    closing: bool  # queued and new turns are dropped

    def interrupt(self, reason: str) -> None: ...

    def settled(self) -> bool:
        """No turn is being answered or waits to be."""

    async def speak_phrase(self, text: str) -> Playout | None: ...


async def speak_cached(out: Speaking, phrases: PhraseCache, text: str) -> Playout | None:
    """Play `phrases`' audio of `text` on `out` as one item; its playout, or None if it could
    not be synthesized. Never raises."""
    rate = out.output_rate
    try:
        audio = await phrases.get(text, rate)
    except Exception:
        log.exception("no audio for the phrase %r", text)
        return None
    playout = Playout(new_id("item"), rate)
    item = playout.item_id
    await out.send("response.audio.started", item_id=item, sample_rate=rate)
    step = rate // 50 * 2
    for i in range(0, len(audio), step):
        playout.audio(len(audio[i : i + step]))
        await out.send_audio(item, audio[i : i + step])
    playout.finish()
    await out.send("response.audio.done", item_id=item, duration_ms=len(audio) * 500 // rate)
    return playout


async def refuse_waiting(
    gw: Gateway, agent_id: str, conversation_id: str | None, source: Source, answers: list[Answer]
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


async def publish_call_end(memory: Memory, event: TranscriptEvent) -> None:
    """Store the `call_ended` transcript event like a turn's (`call_end_event`)."""
    try:
        await asyncio.shield(memory.finish_turn(event))
    except Exception:
        log.exception("could not publish the end of the call")


def call_end_event(
    agent_id: str,
    conversation_id: str | None,
    identity_id: str | None,
    session_id: str,
    source: Source,
) -> TranscriptEvent:
    """The `call_ended` transcript event (empty texts) of a call."""
    now = utcnow()
    return TranscriptEvent(
        event_id=new_id("evt"),
        agent_id=agent_id,
        conversation_id=conversation_id,
        identity_id=identity_id,
        turn_id=f"end-{session_id}",
        source=source,
        user_text="",
        agent_text="",
        agent_text_heard="",
        started_at=now,
        ended_at=now,
        call_ended=True,
    )


async def wind_down(call: Ending, reason: str) -> None:
    """session.end: let queued turns finish (bounded). Gone: cancel the reply, store it."""
    deadline = time.monotonic() + 30
    if reason != "end":
        call.interrupt("client")
        deadline = time.monotonic() + 10
    while not call.settled() and time.monotonic() < deadline:
        if reason != "end":
            call.interrupt("client")
        await asyncio.sleep(0.02)


async def drain_call(call: Ending, deadline: float) -> None:
    """Server shutdown: warn the caller, let the current turn finish (until `deadline`,
    monotonic), then close 1012 so the client reconnects to another instance. (A phone call
    cannot reconnect: pipeline/phone_drain.py.)"""
    await call.transport.error(
        "server_shutdown", "the server is restarting; reconnect to continue", fatal=True
    )
    # a bounded poll, once per call at shutdown
    while not call.settled() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await call.transport.close(CLOSE_RESTART, "server shutting down")
