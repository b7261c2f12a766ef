"""A call that ended leaves no reference cycle holding it: `release` in
pipeline/call_end.py drops what refers back to the call (its barge-in judge, approvals, STT
stream, task group) and its audio state, so the session and its buffers die by reference
counting when the route lets go of it. Before, every hang-up left the whole call in the
oldest generation until a full collection: the soak's memory grew ~10 MB/min with young
collections 5000 allocations apart. Checked with the collector off, on the live gateway (it
serves from a thread of this process): spoken audio, a turn and a hang-up."""

from __future__ import annotations

import asyncio
import gc
import time

import numpy as np

from tests.e2e.conftest import VoiceGateway
from tests.support.fake_llm import Reply
from tests.support.speech import speak
from tests.support.voice_client import VoiceClient


def _sessions() -> int:
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "VoiceSession")


async def _one_call(vg: VoiceGateway) -> None:
    c = await VoiceClient(vg.ws(vg.agent())).connect()
    await c.start()
    await c.stream(np.concatenate([speak("hello there"), np.zeros(16000, np.int16)]), 16000)
    await c.wait_for("response.done", timeout=30)
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000


def test_a_finished_call_dies_without_the_cycle_collector(vg: VoiceGateway) -> None:
    vg.llm.responder = lambda body: Reply(text="Hello to you.")
    calls = vg.server.app.state.gw.calls
    gc.collect()
    assert _sessions() == 0
    gc.disable()
    try:
        asyncio.run(_one_call(vg))
        deadline = time.monotonic() + 10
        # the route, then the socket's ASGI task let go of the call a moment after it ended
        while (calls or _sessions()) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = _sessions()
    finally:
        gc.enable()
    assert not calls
    assert left == 0, "the ended call is kept alive by a reference cycle"
