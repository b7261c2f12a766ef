"""A call that ended leaves no reference cycle holding it: the parts that call back into the
call (the input path's event handler, barge-in's reply) let go of it when it ends, and the rest
(approvals, the STT stream's partial transcripts) refer to the transport only, so the session
and its buffers die by reference counting when the route lets go of it. A call left in a cycle
waits in the oldest generation for a full collection: hundreds of hang-ups a minute grew the
soak's memory ~10 MB/min with young collections 5000 allocations apart. Checked with the
collector off, on the live gateway (it serves from a thread of this process): spoken audio, a
turn and a hang-up."""

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
