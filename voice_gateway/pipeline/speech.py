"""One spoken reply: sentences -> TTS -> paced audio frames, cancellable, with a timeline of
what was sent so the reply can be cut to what the caller heard."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from voice_gateway.tts.base import TTSError, TTSProvider

log = logging.getLogger(__name__)

FRAME_MS = 20
MAX_LEAD_MS = 240  # how far audio may run ahead of real time (the client's jitter buffer)
# Past the lead, wait until it is down by REFILL_MS, then send that much at once: the frames
# leave in one socket write (protocol/uvicorn_ws.py) and one timer wake-up instead of one of
# each per 20 ms frame (docs/benchmarks.md#voice_concurrency).
REFILL_MS = 100
# Mid-reply, while the next audio is not ready (a sentence still being synthesized, the next
# one not yet written, a tool running after the filler), silence is sent once less than
# KEEP_MS is left to play: a frame at a time, REFILL_MS at a time once the wait has lasted
# that long. So the client's playback never runs dry before the reply ends. A client that ran
# dry restarts when the next audio reaches it, late by that packet's jitter, and the echo
# canceller, which schedules its reference on the gateway's clock, then meets the echo that
# much off the path it had learned (bench/echo_restarts.py, AEC3: 29.4 dB removed with no
# jitter, 21.9-14.9 dB with 20-100 ms on each restart; kept playing, 28.6-29.6 dB).
KEEP_MS = 40
# how long a reply holds back the rest of its turn (the LLM stream, text events, the step's
# write) for its first audio: a local voice (espeak-ng) needs well under 1 ms of synthesis,
# but its buffers reach the event loop only when the loop is idle and the GIL free
FIRST_AUDIO_WAIT_S = 0.1

SendAudio = Callable[[bytes], Awaitable[None]]


async def _nowhere(pcm: bytes) -> None:
    """A detached speaker's sink (Speaker.detach)."""


@dataclass(slots=True)
class Segment:
    """A piece of the reply's audio timeline."""

    kind: str  # "sentence" | "filler" | "apology"
    text: str
    message_id: str | None
    start_ms: float = 0.0
    dur_ms: float = 0.0
    done: bool = False
    sent_at: float | None = None  # monotonic time its first frame was sent


@dataclass(slots=True)
class _Job:
    segment: Segment
    audio: bytes | None = None  # pre-synthesized (cached phrase)


@dataclass
class Speaker:
    tts: TTSProvider
    rate: int
    send: SendAudio
    on_first_audio: Callable[[], Awaitable[None]] | None = None
    on_tts_error: Callable[[TTSError], Awaitable[None]] | None = None
    # its state (not arguments): the timeline sent, the clock, the queue
    segments: list[Segment] = field(init=False, default_factory=list)
    sent_ms: float = field(init=False, default=0.0)
    first_audio_at: float | None = field(init=False, default=None)
    tts_ttfb_ms: float | None = field(init=False, default=None)
    tts_error: TTSError | None = field(init=False, default=None)
    _jobs: deque[_Job] = field(init=False, default_factory=deque)
    _wake: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _closed: bool = field(init=False, default=False)
    _clock_start: float | None = field(init=False, default=None)
    _current: Segment | None = field(init=False, default=None)
    # silence sent to keep the client's playback going
    filled_ms: float = field(init=False, default=0.0)
    _waited_ms: float = field(init=False, default=0.0)  # of it, since audio last came
    # mid-reply, how long the client had nothing left to play
    underrun_ms: float = field(init=False, default=0.0)
    # when to send silence, while waiting for audio
    _keep: asyncio.TimerHandle | None = field(init=False, default=None)
    _filling: asyncio.Task[None] | None = field(init=False, default=None)
    # first audio, or no hope
    _started: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    # everything queued so far has been sent (or the speaker stopped)
    _idle: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    def say(self, text: str, message_id: str | None, kind: str = "sentence") -> None:
        """Queue text for TTS; after a TTS failure in this reply, further text stays unspoken
        (a hung voice would cost its time-out per sentence; the text still reaches the
        client as response.text.delta)."""
        if text.strip() and self.tts_error is None:
            self._jobs.append(_Job(Segment(kind, text, message_id)))
            self._idle.clear()
            self._wake.set()

    def play(self, text: str, audio: bytes, kind: str, *, urgent: bool = False) -> None:
        """Queue pre-synthesized audio (cached filler or apology); urgent goes first."""
        job = _Job(Segment(kind, text, None), audio)
        if urgent:
            self._jobs.appendleft(job)
        else:
            self._jobs.append(job)
        self._idle.clear()
        self._wake.set()

    def close(self) -> None:
        """No more text will come; run() returns when everything queued has been sent."""
        self._closed = True
        self._wake.set()

    def detach(self) -> None:
        """The reply is over: drop the callbacks (bound methods of the reply that owns this
        speaker). Without them reply -> speaker -> callback -> reply is a reference cycle that
        only the cyclic garbage collector frees, after it has been promoted to the oldest
        generation: a longer full collection, paid by every call."""
        self.on_first_audio = self.on_tts_error = None
        self.send = _nowhere

    @property
    def frame_bytes(self) -> int:
        return self.rate * FRAME_MS // 1000 * 2

    async def first_audio(self, timeout_s: float = FIRST_AUDIO_WAIT_S) -> None:
        """Wait (at most `timeout_s`) until the first audio frame is sent, or the speaker has
        nothing left to say (its text failed or was empty). The reply calls this after its
        first sentence: until that audio is out, anything else the turn does on the event
        loop (or holding the GIL) delays it, and the rest of the reply is not needed yet."""
        if self._started.is_set():
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._started.wait()
        except TimeoutError:
            return

    async def spoken(self) -> None:
        """Until everything queued so far has been sent (or the speaker has stopped)."""
        await self._idle.wait()

    async def run(self) -> None:
        try:
            while True:
                if not self._jobs:
                    self._idle.set()
                    if self._closed:
                        return
                    self._wake.clear()
                    self._keep_playing()
                    await self._wake.wait()
                    continue
                job = self._jobs.popleft()
                await self._speak(job)
                if self.first_audio_at is None:
                    self._started.set()  # it said nothing (failed, or no audio): no wait
        finally:
            self._started.set()
            self._idle.set()
            self._stop_keeping()
            if self._filling is not None:
                self._filling.cancel()

    async def _speak(self, job: _Job) -> None:
        seg = self._current = job.segment
        seg.start_ms = self.sent_ms
        self.segments.append(seg)
        if job.audio is not None:
            await self._send_paced(job.audio)
        else:
            asked = time.perf_counter()
            pending = b""
            try:
                self._keep_playing()
                async for chunk in self.tts.synthesize(seg.text, self.rate):
                    if self.tts_ttfb_ms is None:
                        self.tts_ttfb_ms = (time.perf_counter() - asked) * 1000
                    pending += chunk
                    cut = len(pending) - len(pending) % self.frame_bytes
                    if cut:
                        await self._send_paced(pending[:cut])
                        pending = pending[cut:]
                    self._keep_playing()
            except TTSError as exc:
                self._stop_keeping()
                log.warning("TTS failed: %s", exc)
                first_failure = self.tts_error is None
                self.tts_error = exc
                self._jobs = deque(j for j in self._jobs if j.audio is not None)
                if first_failure and self.on_tts_error is not None:
                    await self.on_tts_error(exc)
            if pending:
                await self._send_paced(pending + b"\x00" * (self.frame_bytes - len(pending)))
        seg.dur_ms = self.sent_ms - seg.start_ms
        seg.done = True

    def _keep_playing(self) -> None:
        """Waiting for audio: send silence once less than KEEP_MS is left to play."""
        self._stop_keeping()
        if self._clock_start is None or self._filling is not None:
            return  # nothing played yet (the first audio is no gap), or being filled
        lead = self._lead_ms()  # (a stream's start holds less: wait until it is nearly out)
        delay = lead - KEEP_MS if lead > KEEP_MS + FRAME_MS else lead - FRAME_MS / 2
        self._keep = asyncio.get_running_loop().call_later(max(delay, 0.0) / 1000, self._fill)

    def _stop_keeping(self) -> None:
        if self._keep is not None:
            self._keep.cancel()
            self._keep = None

    def _lead_ms(self) -> float:
        assert self._clock_start is not None
        return self.sent_ms - (time.monotonic() - self._clock_start) * 1000

    def _fill(self) -> None:
        self._keep = None
        self._filling = asyncio.get_running_loop().create_task(self._send_silence())

    async def _send_silence(self) -> None:
        ms = FRAME_MS if self._waited_ms < REFILL_MS else REFILL_MS
        try:
            await self._send_paced(bytes(self.frame_bytes * (ms // FRAME_MS)), fill=True)
            self.filled_ms += ms
            self._waited_ms += ms
        finally:
            self._filling = None
        self._keep_playing()

    async def _send_paced(self, audio: bytes, *, fill: bool = False) -> None:
        if not fill:
            self._stop_keeping()
            if self._filling is not None:
                await asyncio.shield(self._filling)  # its frames go out whole, before these
                self._stop_keeping()
            self._waited_ms = 0.0
        fb = self.frame_bytes
        for i in range(0, len(audio), fb):
            now = time.monotonic()
            if self._clock_start is None:
                self._clock_start = now
                self.first_audio_at = now
                if self.on_first_audio is not None:
                    await self.on_first_audio()
                self._started.set()
            elapsed_ms = (now - self._clock_start) * 1000
            if self.sent_ms < elapsed_ms:  # underrun: the client has played everything
                self.underrun_ms += elapsed_ms - self.sent_ms
                self._clock_start = now - self.sent_ms / 1000
                elapsed_ms = self.sent_ms
            lead = self.sent_ms - elapsed_ms
            if lead > MAX_LEAD_MS:
                await asyncio.sleep((lead - MAX_LEAD_MS + REFILL_MS) / 1000)
            frame = audio[i : i + fb]
            if not fill and self._current is not None and self._current.sent_at is None:
                self._current.sent_at = time.monotonic()
                self._current.start_ms = self.sent_ms  # (after any silence kept before it)
            await self.send(frame)
            self.sent_ms += len(frame) / 2 / self.rate * 1000

    def played_estimate_ms(self) -> float:
        """Audio the client has had time to play (sent, and not ahead of the clock)."""
        if self._clock_start is None:
            return 0.0
        return min(self.sent_ms, (time.monotonic() - self._clock_start) * 1000)


def heard_text(segments: list[Segment], played_ms: float) -> dict[str | None, str]:
    """Per message id, the sentence text the caller heard within `played_ms` of audio
    (a sentence cut mid-way keeps the proportional share of its words)."""
    heard: dict[str | None, list[str]] = {}
    for seg in segments:
        if seg.kind != "sentence":
            continue
        parts = heard.setdefault(seg.message_id, [])
        if seg.start_ms >= played_ms:
            continue
        if seg.done and seg.start_ms + seg.dur_ms <= played_ms:
            parts.append(seg.text)
            continue
        words = seg.text.split()
        # a sentence still being synthesized: estimate its length at ~300 ms per word
        dur = seg.dur_ms if seg.done else max(len(words) * 300.0, 1.0)
        share = (played_ms - seg.start_ms) / dur if dur else 0.0
        n = int(len(words) * min(1.0, share))
        if n:
            parts.append(" ".join(words[:n]))
    return {k: " ".join(v) for k, v in heard.items()}
