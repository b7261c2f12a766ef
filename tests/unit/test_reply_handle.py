"""A reply's handle (pipeline/reply.py `Reply`, pipeline/playout.py `Playout`): interrupted with
a reason, `wait_for_playout()` resolving on the client's played marks, on the clock where no
marks come, and on an interrupt, and the text the caller heard. Real espeak-ng speech; the host
is a minimal stand-in for the call (what `ReplyHost` names)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from voice_gateway.pipeline.playout import MARK_GRACE_S, Playout
from voice_gateway.pipeline.reply import Reply, UserTurn
from voice_gateway.tts.espeak import EspeakTTS

LONG = (
    "Here is the first sentence of a long greeting. Here is the second one, which goes on. "
    "And here is a third sentence, so that the reply plays for several seconds."
)


class Host:
    """The call as a reply sees it: events and audio are recorded."""

    def __init__(self) -> None:
        self.voice = SimpleNamespace(tts=EspeakTTS())
        self.output_rate = 16000
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.audio = 0

    async def send(self, type_: str, **fields: Any) -> None:
        self.events.append((type_, fields))

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        self.audio += len(pcm)


def greeting(host: Host, text: str = LONG, **kw: Any) -> Reply:
    return Reply(host, UserTurn(text, "turn-1", greeting=True), **kw)  # type: ignore[arg-type]


async def _started(reply: Reply, tg: asyncio.TaskGroup) -> asyncio.Task[None]:
    task = reply.start(tg, reply.run())
    while not reply.playing:
        await asyncio.sleep(0.01)
    return task


async def test_interrupt_cuts_the_reply_with_its_reason_and_resolves_the_playout() -> None:
    host = Host()
    reply = greeting(host)
    assert not reply.interrupt("barge_in")  # not started: nothing to cut
    async with asyncio.TaskGroup() as tg:
        task = await _started(reply, tg)
        await asyncio.sleep(0.5)
        assert reply.text == LONG and reply.playing
        waiting = tg.create_task(reply.wait_for_playout())
        assert reply.interrupt("client")
        await asyncio.wait([task])
        await asyncio.wait_for(waiting, 1.0)  # resolved by the interrupt, not the audio
    assert task.cancelled() and reply.interrupted == "client" and reply.done()
    assert not reply.playing and not reply.interrupt("barge_in")  # over: a no-op
    heard = reply.heard()
    assert heard and LONG.startswith(heard)
    assert len(heard.split()) < len(LONG.split())  # only what had time to play


async def test_the_client_marks_decide_what_was_heard() -> None:
    host = Host()
    reply = greeting(host)
    async with asyncio.TaskGroup() as tg:
        await _started(reply, tg)
        await asyncio.sleep(0.3)
        reply.played(0)  # the client has played nothing yet
        assert reply.played_ms == 0 and reply.heard() == ""
        reply.played(2600)  # marks only move forward
        reply.played(100)
        assert reply.played_ms == 2600
        assert reply.heard().startswith("Here is the first sentence")
        reply.interrupt("barge_in")


async def test_an_uninterruptible_reply_is_not_cut() -> None:
    host = Host()
    reply = greeting(host, "Short and sure.", allow_interruptions=False)
    async with asyncio.TaskGroup() as tg:
        task = await _started(reply, tg)
        assert not reply.interrupt("barge_in")
    assert not task.cancelled() and reply.interrupted is None
    assert "response.done" in [e for e, _ in host.events]


async def test_playout_on_the_clock_waits_for_the_audio_to_be_heard() -> None:
    """No marks: the audio sent plus its duration (a burst of 1 s is heard 1 s later)."""
    out = Playout("item-1", 16000)
    t0 = time.monotonic()
    for _ in range(50):
        out.audio(640)  # 1 s in 20 ms frames, sent at once
    out.finish()
    assert not out.done
    await asyncio.wait_for(out.wait(), 3.0)
    assert 0.9 <= time.monotonic() - t0 < 1.5 and out.done


async def test_playout_with_marks_resolves_on_the_last_one() -> None:
    out = Playout("item-1", 16000)
    for _ in range(50):
        out.audio(640)
    out.mark(400)
    out.finish()
    waiting = asyncio.ensure_future(out.wait())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the client has played 400 of 1000 ms
    out.mark(980)  # the last 20 ms frame not yet heard
    await asyncio.sleep(0.05)
    assert not waiting.done()
    t0 = time.monotonic()
    out.mark(997)  # within the slack of the end (rounding): heard
    await asyncio.wait_for(waiting, 1.0)
    assert time.monotonic() - t0 < 0.1


@pytest.mark.parametrize("marks", [False, True])
async def test_playout_gives_up_on_marks_that_stop(marks: bool) -> None:
    """A client that reported marks, then stopped: the clock plus MARK_GRACE_S."""
    out = Playout("item-1", 16000)
    out.audio(6400)  # 200 ms
    if marks:
        out.mark(20)
    out.finish()
    t0 = time.monotonic()
    await asyncio.wait_for(out.wait(), MARK_GRACE_S + 2)
    took = time.monotonic() - t0
    assert (MARK_GRACE_S <= took < MARK_GRACE_S + 1) if marks else took < 0.5


async def test_wait_for_playout_of_a_whole_reply() -> None:
    host = Host()
    reply = greeting(host, "Hello there.")
    t0 = time.monotonic()
    async with asyncio.TaskGroup() as tg:
        reply.start(tg, reply.run())
        await reply.wait_for_playout()
        heard_at = time.monotonic()
    spoken_s = host.audio / 2 / 16000
    assert reply.interrupted is None and reply.heard() == "Hello there."
    assert heard_at - t0 >= spoken_s - 0.05  # not before its audio could have played
