"""Shutdown of a live phone call (docs/operations.md, "Graceful shutdown").

A Twilio media stream cannot reconnect to another gateway: closing it hangs up on the caller.
So on SIGTERM a phone call goes on as usual until it ends or the drain deadline
(VG_DRAIN_TIMEOUT_S) comes near; then the current reply is stopped, the caller hears a short
goodbye (synthesized by the configured TTS, at the call's rate, before it is needed), and once
Twilio's mark says the goodbye was played (its playout; or the deadline is reached) the stream
is closed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from voice_gateway.pipeline.call_end import Ending
from voice_gateway.pipeline.transport import CLOSE_NORMAL

log = logging.getLogger(__name__)
GOODBYE = "Sorry, I have to end this call now. Please call again in a moment. Goodbye."
MARGIN_S = 1.0  # network and playback slack between the goodbye's end and the deadline


async def drain_phone(call: Ending, deadline: float) -> None:
    """Serve the call until it ends, or say goodbye just before `deadline` (monotonic)."""
    rate = call.output_rate
    audio = await call.voice.phrases.get(GOODBYE, rate)
    speak_s = len(audio) / 2 / rate
    start_at = deadline - speak_s - MARGIN_S
    log.info("phone call kept through the drain; goodbye in %.1f s", start_at - time.monotonic())
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(call.ended.wait(), max(0.0, start_at - time.monotonic()))
        return  # the caller hung up (or the call ended) before the deadline
    call.closing = True  # no new turns from here on
    call.interrupt("server_shutdown")
    while not call.settled() and time.monotonic() < start_at + MARGIN_S / 2:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    goodbye = await call.speak_phrase(GOODBYE)
    if goodbye is not None:
        ended = asyncio.ensure_future(call.ended.wait())
        played = asyncio.ensure_future(goodbye.wait())
        try:
            await asyncio.wait(
                [ended, played],
                timeout=max(0.0, deadline - time.monotonic()),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            ended.cancel()
            played.cancel()
    log.info("goodbye played; closing the phone call for the shutdown")
    await call.transport.close(CLOSE_NORMAL, "server shutting down")
