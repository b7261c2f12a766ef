"""voice_concurrency's load: the calls' speech pattern and the client processes that
stream it at real-time pace."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from _concurrency_consts import CYCLE_S, ENDPOINT_MS, FRAME, LONG_SPEECH
from _voice import last_sound_frame, speech_clip
from _wsload import OP_BINARY, LoadCall, connect, frame_header


@dataclass(frozen=True)
class Pattern:
    """A call's cycle of frames and where its turn ends: `last` is the index of the last frame
    with sound in it (the end of the caller's speech), `endpoint` the index of the frame whose
    handling ends the turn in the gateway's TurnDetector (webrtcvad, the gateway's settings)."""

    frames: list[bytes]
    last: int
    endpoint: int

    @property
    def endpoint_delay_ms(self) -> int:
        return (self.endpoint - self.last) * 20


def _speech(text: str) -> tuple[np.ndarray, int]:
    if not text.startswith("real:"):
        speech = speech_clip(text)
        return speech, last_sound_frame(speech)
    from tests.support.real_speech import MISSING, clips, speech_span

    found = {c.name: c.pcm for c in clips()}
    if text[5:] not in found:
        raise SystemExit(MISSING if not found else f"no recording {text[5:]}: {sorted(found)}")
    pcm = found[text[5:]]
    return pcm, speech_span(pcm)[1] - 1


def _filler(text: str, speech: np.ndarray, n: int) -> np.ndarray:
    if not text.startswith("real:"):
        return np.zeros(n, dtype=np.int16)
    from tests.support.real_speech import background

    return np.resize(background(speech, 20), n)


def cycle_pattern(
    cycle_s: float = CYCLE_S, text: str = LONG_SPEECH, endpoint_ms: int = ENDPOINT_MS
) -> Pattern:
    """The caller's cycle: `text` spoken by espeak-ng, or `real:<clip>` one of the recordings
    of tests/support/real_speech.py (its last sound: the last frame within 25 dB of its
    loudest), then silence to fill `cycle_s`: digital silence after espeak-ng, the recording's
    own room tone after a recording (a microphone never sends zeros, and after them webrtcvad
    hears a recording's room tone as speech: bench/voice_latency.py)."""
    from tests.support.speech import frames
    from voice_gateway.settings import Settings
    from voice_gateway.turns.config import TurnConfig
    from voice_gateway.turns.detector import TurnDetector
    from voice_gateway.turns.events import SpeechStopped
    from voice_gateway.vad import create_vad

    speech, last = _speech(text)
    pad = int(cycle_s * 16000) - len(speech)
    if pad <= 0:
        raise SystemExit(
            f"the speech ({len(speech) / 16000:.1f} s) does not fit a {cycle_s} s cycle"
        )
    pattern = frames(np.concatenate([speech, _filler(text, speech, pad)]), 16000)
    defaults = Settings.model_fields
    detector = TurnDetector(
        create_vad("webrtc", defaults["vad_mode"].default),
        TurnConfig(silence_ms=endpoint_ms, min_speech_ms=defaults["min_speech_ms"].default),
    )
    ends = [
        k % len(pattern)
        for k in range(2 * len(pattern))  # the second cycle: the detector's state as in a call
        if any(isinstance(e, SpeechStopped) for e in detector.feed(pattern[k % len(pattern)]))
    ]
    if not ends or ends[-1] <= last:
        raise SystemExit(f"the turn does not end within the {cycle_s} s cycle")
    return Pattern(pattern, last, ends[-1])


class BenchCall(LoadCall):
    """A call of the benchmark on the light client (bench/_wsload.py): what it sent when, and
    what it heard back. `turns`: [last speech frame sent, endpoint frame sent, first reply
    audio received after it or None] per utterance streamed whole."""

    def __init__(self, host: str, path: str, offset: int) -> None:
        super().__init__(host, path)
        self.offset = offset
        self.sent_at: list[float] = []
        self.session_id = ""
        self.conversation_id = ""
        self.started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.latencies: list[float] = []
        self.replies = 0
        self.turns: list[list[float | None]] = []
        self.utterance_start = False  # the current utterance was streamed from its first frame
        self.begun = False  # the pattern's first frame was sent: silence until then (_stream)
        self.event_count = 0  # a call refused by admission control must have none
        self.last_speech_at = 0.0

    def mark(self, index: int, at: float, pattern: Pattern) -> None:
        """Frame `index` of the pattern was just sent at `at`."""
        if index == 0:
            self.utterance_start = self.begun = True
        elif index == pattern.last:
            self.last_speech_at = at
        elif index == pattern.endpoint and self.utterance_start:
            self.utterance_start = False
            self.turns.append([self.last_speech_at, at, None])
            self.audio_waiting = True

    def on_audio(self, at: float) -> None:
        self.turns[-1][2] = at
        self.audio_waiting = False

    def on_event(self, at: float, event: dict[str, Any]) -> None:
        self.event_count += 1
        kind = event.get("type")
        if kind == "speech.started":
            idx = event["at_ms"] // 20  # the input frame whose handling emitted it
            if idx < len(self.sent_at):
                self.latencies.append((at - self.sent_at[idx]) * 1000)
        elif kind == "response.done":
            self.replies += 1
        elif kind == "session.started":
            self.session_id = event.get("session_id", "")
            self.conversation_id = event.get("conversation_id", "")
            if not self.started.done():
                self.started.set_result(None)
        elif kind == "error":
            self.errors.append(event.get("code", "?"))


class LibCall(BenchCall):
    """The same call on the `websockets` library's asyncio client (--client websockets): a
    task per call reads, each frame is an awaited send. Heavier; a cross-check of the light
    client."""

    def __init__(self, ws: Any, offset: int) -> None:
        super().__init__("", "", offset)
        self.ws = ws

    async def read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    self.audio_bytes += len(msg)
                    if self.audio_waiting:
                        self.on_audio(time.monotonic())
                else:
                    self.on_event(time.monotonic(), json.loads(msg))
        except ConnectionClosed as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
        self.close_code = self.ws.close_code
        if not self.closed.done():
            self.closed.set_result(None)


def _start_event(caller: str | None) -> dict[str, Any]:
    return {"type": "session.start", **({"caller": caller} if caller else {})}


async def _open(url: str, offset: int, client: str, caller: str | None) -> BenchCall:
    if client == "websockets":
        import websockets

        ws = await websockets.connect(url, compression=None, max_size=2**22)
        call: BenchCall = LibCall(ws, offset)
        call.reader = asyncio.create_task(call.read())  # type: ignore[attr-defined]
        await ws.send(json.dumps(_start_event(caller)))
    else:
        call = await connect(BenchCall, url, offset)
        call.send_json(_start_event(caller))
    # started, or refused (admission control closes 1013 before any event)
    closed = asyncio.ensure_future(call.closed)
    await asyncio.wait([call.started, closed], timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if not call.started.done() and not call.closed.done():
        raise TimeoutError("a call neither started nor was refused within 30 s")
    return call


async def _stream(calls: list[BenchCall], ticks: int, groups: int, pattern: Pattern) -> list[float]:
    """Each call's frames in real time, the calls in `groups` phases 20/groups ms apart; each
    frame is written straight to its socket (masked with a fresh key). Returns each tick's
    lateness (ms): how far the generator itself fell behind the schedule. A call sends silence
    until its phase reaches the pattern's first frame: one that joined mid-utterance would
    otherwise open with a fragment ("clubs"), a turn the client does not count but the
    gateway decides and answers (under `smart`, the longest waits of a level)."""
    frames = pattern.frames
    quiet = bytes(len(frames[0]))
    n = len(frames)
    marks = {0, pattern.last, pattern.endpoint}
    header = frame_header(OP_BINARY, FRAME)
    lib = [c for c in calls if isinstance(c, LibCall)]
    by_group = [calls[g::groups] for g in range(groups)]
    late: list[float] = []
    now = time.monotonic
    t0 = now()
    for k in range(ticks):
        for g, members in enumerate(by_group):
            delay = t0 + k * 0.02 + g * 0.02 / groups - now()
            if delay > 0:
                await asyncio.sleep(delay)
            late.append(max(0.0, -delay) * 1000)
            for c in members:
                at = now()
                c.sent_at.append(at)
                idx = (c.offset + k) % n
                frame = frames[idx] if c.begun or idx == 0 else quiet
                if lib:
                    await c.ws.send(frame)  # type: ignore[attr-defined]
                else:
                    c.send(frame, header)
                if idx in marks:
                    c.mark(idx, at, pattern)
    return late


async def _load(
    urls: list[str],
    callers: list[str | None],
    offsets: list[int],
    ticks: int,
    start_at: float,
    pattern: Pattern,
    client: str,
) -> dict[str, Any]:
    offered = [
        await _open(u, o, client, who) for u, o, who in zip(urls, offsets, callers, strict=True)
    ]
    calls = [c for c in offered if c.started.done()]
    refused = [
        {"close_code": c.close_code, "events": c.event_count, "errors": c.errors}
        for c in offered
        if not c.started.done()
    ]
    # a wall-clock start shared by all loaders, then monotonic pacing
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()
    late = await _stream(calls, ticks, groups=10, pattern=pattern)
    cpu_s = time.process_time() - cpu0
    stream_end = time.monotonic()
    # calls end at their own time, spread over a second (not all in the same millisecond)
    for c in calls:
        if isinstance(c, LibCall):
            await c.ws.send(json.dumps({"type": "session.end"}))
        else:
            c.send_json({"type": "session.end"})
        await asyncio.sleep(1.0 / max(1, len(calls)))
    if calls:  # (a loader whose every call was refused has none to wait for)
        await asyncio.wait([asyncio.ensure_future(c.closed) for c in calls], timeout=60)
    return {
        "calls": [
            {
                "session_id": c.session_id,
                "conversation_id": c.conversation_id,
                "sent": len(c.sent_at),
                "latencies": c.latencies,
                "turns": c.turns,
                "replies": c.replies,
                "audio_bytes": c.audio_bytes,
                "errors": c.errors,
                "close_code": c.close_code,
            }
            for c in calls
        ],
        "refused": refused,
        "cpu_s": cpu_s,
        "late": late,
        "stream_end": stream_end,
    }


def _loader(
    conn: Connection,
    urls: list[str],
    callers: list[str | None],
    offsets: list[int],
    ticks: int,
    start_at: float,
    pattern: Pattern,
    client: str,
) -> None:
    import gc

    import uvloop

    gc.disable()  # the load generator must not pause to collect (a short-lived process)
    try:
        result = uvloop.run(_load(urls, callers, offsets, ticks, start_at, pattern, client))
    except Exception as exc:
        result = {"failed": f"{type(exc).__name__}: {exc}"}
    conn.send(result)
