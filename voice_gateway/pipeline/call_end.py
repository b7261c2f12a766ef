"""What a call says and leaves behind around its end: cached phrases (an apology, the drain's
goodbye) as audio items of their own, calls still waiting for an approval refused (nothing
runs), and the call-end transcript event that makes the caller's sleeptime rewrite due."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from agents.approvals import Answer
from memory.ids import new_id, utcnow
from memory.models import Source, TranscriptEvent
from voice_gateway.pipeline.transport import CLOSE_GOING_AWAY, CLOSE_RESTART

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


async def watch_idle(call: Any) -> None:
    """Close a call that sent nothing for VG_IDLE_TIMEOUT_S (1001); a reply in progress is
    activity too."""
    while True:
        timeout = call.voice.settings.idle_timeout_s
        await asyncio.sleep(min(1.0, timeout / 4))
        if call.busy:
            call.last_rx = time.monotonic()
        if time.monotonic() - call.last_rx > timeout:
            await call.transport.close(CLOSE_GOING_AWAY, "idle timeout")
            return


async def wind_down(call: Any, reason: str) -> None:
    """session.end: let queued turns finish (bounded). Gone: cancel the reply, store it."""
    deadline = time.monotonic() + 30
    if reason != "end":
        call.interrupt("client")
        deadline = time.monotonic() + 10
    while (call.busy or not call.turns.empty()) and time.monotonic() < deadline:
        if reason != "end":
            call.interrupt("client")
        await asyncio.sleep(0.02)


async def drain_call(call: Any, deadline: float) -> None:
    """Server shutdown: warn the caller, let the current turn finish (until `deadline`,
    monotonic), then close 1012 so the client reconnects to another instance. A phone call
    cannot reconnect: it goes on, then hears a goodbye (pipeline/phone_drain.py)."""
    if call.transport.source == "phone":
        from voice_gateway.pipeline.phone_drain import drain_phone

        await drain_phone(call, deadline)
        return
    await call.transport.error(
        "server_shutdown", "the server is restarting; reconnect to continue", fatal=True
    )
    # a bounded poll, once per call at shutdown
    while (call.busy or not call.turns.empty()) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await call.transport.close(CLOSE_RESTART, "server shutting down")


# What refers back to the call (bound methods, closures: its barge-in judge, approvals, STT
# stream, task group) and holds its audio state: a call's objects are one big reference cycle
# (a shutdown drain may still call `interrupt` on a call that just ended: its reply and reply
# task stay, and are None once a reply is over anyway)
RELEASED = (
    "barge_in", "approvals", "stt", "detector", "echo", "tg", "watchers", "resampler",
    "far_resampler",
)  # fmt: skip


def release(call: Any) -> None:
    """The call is over: drop the parts in RELEASED, so that the call and its buffers die by
    reference counting when the route lets go of it, instead of waiting in the oldest
    generation for a full collection (with hundreds of hang-ups a minute that garbage grew
    the soak's memory by ~10 MB/min: docs/benchmarks.md, `voice_soak`)."""
    for name in RELEASED:
        call.__dict__.pop(name, None)
