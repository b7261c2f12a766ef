"""A finished reply leaves no reference cycle: its speaker's callbacks are the
reply's own bound methods, and until `Speaker.detach` dropped them, every turn left a
reply -> speaker -> callback -> reply cycle that only the cyclic garbage collector could free,
after it had been promoted to the oldest generation (longer full collections for every call).
Checked with the collector off: the reply must die by reference counting alone. Real
espeak-ng speech; the host is a minimal stand-in for the call (what `ReplyHost` names).

Not covered: a reply cancelled by a barge-in still leaves a cycle, through the CancelledError's
traceback and the frame of CPython 3.11's TaskGroup that caught it (the rarer case: left)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from types import SimpleNamespace
from typing import Any

from voice_gateway.pipeline.reply import Reply, UserTurn
from voice_gateway.pipeline.speech import Speaker
from voice_gateway.tts.espeak import EspeakTTS


class Host:
    """The call as a reply sees it: events and audio are recorded."""

    def __init__(self) -> None:
        self.voice = SimpleNamespace(tts=EspeakTTS())
        self.output_rate = 16000
        self.events: list[str] = []
        self.audio = 0

    async def send(self, type_: str, **fields: Any) -> None:
        self.events.append(type_)

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        self.audio += len(pcm)


async def _greet(host: Host) -> weakref.ref[Reply]:
    reply = Reply(host, UserTurn("Hello there, how can I help?", "turn-1", greeting=True))  # type: ignore[arg-type]
    await reply.run()
    ref = weakref.ref(reply)
    del reply
    return ref


def test_a_finished_reply_dies_without_the_cycle_collector() -> None:
    host = Host()
    gc.collect()
    gc.disable()
    try:
        ref = asyncio.run(_greet(host))
        alive = ref() is not None
    finally:
        gc.enable()
    assert host.audio > 0 and host.events[0] == "response.started"
    assert "response.done" in host.events
    assert not alive, "the reply is kept alive by a reference cycle"


def test_a_detached_speaker_sends_nothing() -> None:
    sent: list[bytes] = []

    async def send(pcm: bytes) -> None:
        sent.append(pcm)

    async def run() -> None:
        speaker = Speaker(EspeakTTS(), 16000, send)
        speaker.detach()
        speaker.say("Nobody hears this.", None)
        speaker.close()
        await speaker.run()

    asyncio.run(run())
    assert sent == []
