"""How far one audio item (a reply, a cached phrase) has played at the caller's end.

`Playout` counts the audio sent for the item on the real-time clock the speaker paces by
(a gap restarts the clock: the client's buffer ran dry), takes the client's `Played` marks
(the browser's `audio.played`, Twilio's echoed marks), and resolves `wait()` once the caller
has heard all of it: a mark at the end of the audio where the transport reports marks (bounded
by MARK_GRACE_S past the clock, for a client that stops reporting), else the clock (the audio
sent, plus its duration); or at once when the item was cut (barge-in, hang-up, a failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

MARK_SLACK_MS = 5  # a mark this close to the end counts as the end (rounding: marks cover all)
MARK_GRACE_S = 2.0  # marks came, but not the last: give up waiting this long past the clock


class Playout:
    __slots__ = ("_clock", "_marked", "_out", "_sent", "item_id", "marked_ms", "rate", "sent_ms")

    def __init__(self, item_id: str, rate: int) -> None:
        self.item_id = item_id  # the audio item (response.audio.* events, marks)
        self.rate = rate
        self.sent_ms = 0.0
        self.marked_ms: int | None = None  # the client's latest mark for the item
        self._clock: float | None = None  # monotonic time sent_ms would be heard from 0
        self._sent = asyncio.Event()  # all audio sent (or cut)
        self._out = asyncio.Event()  # heard to the end (or cut)
        self._marked = asyncio.Event()  # a mark came (reset by `reach`)

    def audio(self, nbytes: int) -> None:
        """`nbytes` of PCM16 went out for the item."""
        now = time.monotonic()
        if self._clock is None or now - self._clock > self.sent_ms / 1000:
            self._clock = now - self.sent_ms / 1000  # (first audio, or the client ran dry)
        self.sent_ms += nbytes / 2 / self.rate * 1000

    def heard_ms(self) -> float:
        """The client's mark, else the clock's estimate (sent and not ahead of real time)."""
        if self.marked_ms is not None:
            return float(self.marked_ms)
        if self._clock is None:
            return 0.0
        return min(self.sent_ms, (time.monotonic() - self._clock) * 1000)

    def mark(self, played_ms: int) -> None:
        """A `Played` mark for the item."""
        self.marked_ms = max(played_ms, self.marked_ms or 0)
        self._marked.set()
        if self._sent.is_set() and self.marked_ms >= self.sent_ms - MARK_SLACK_MS:
            self._out.set()

    def finish(self) -> None:
        """Everything was sent; what is left is the caller hearing it."""
        self._sent.set()
        if self.marked_ms is not None and self.marked_ms >= self.sent_ms - MARK_SLACK_MS:
            self._out.set()

    def cut(self) -> None:
        """Nothing more will play (interrupted, failed, the call ended)."""
        self._sent.set()
        self._out.set()

    @property
    def done(self) -> bool:
        return self._out.is_set()

    async def wait(self) -> None:
        await self._sent.wait()
        if self._out.is_set():
            return
        left_s = max(0.0, self.sent_ms - self._clock_ms()) / 1000
        if self.marked_ms is not None:
            left_s += MARK_GRACE_S  # the transport reports marks: the last one decides
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left_s):
                await self._out.wait()
        self._out.set()

    async def reach(self, ms: float) -> None:
        """Until the caller has heard the item's first `ms` (a mark where the transport
        reports marks, bounded by MARK_GRACE_S past the clock; else the clock), or it was
        cut: e.g. an announcement before a transfer, mid-reply."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, ms - self._clock_ms()) / 1000):
                await self._out.wait()
        if self.marked_ms is None or self._out.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(MARK_GRACE_S):
                while (self.marked_ms or 0) < ms - MARK_SLACK_MS and not self._out.is_set():
                    self._marked.clear()
                    await self._marked.wait()

    def _clock_ms(self) -> float:
        return 0.0 if self._clock is None else (time.monotonic() - self._clock) * 1000
