"""The caller's audio into a call: resampling to 16 kHz, echo cancellation, the turn detector
(VAD), STT feeding and barge-in's per-frame clock, in that order, 20 ms at a time.

`InputPath.audio(pcm)` is the entry point for audio the transport's `receive` returns.
`InputPath.now(pcm)` is the transport's synchronous audio sink (`Transport.audio_sink`): a
20 ms frame that makes no turn event (most frames; in an utterance, when STT takes it at once:
`feed_now`) is handled there, without waking the call's input task (docs/benchmarks.md,
capacity). Any other frame comes on through `receive` to `audio`, which picks up where `now`
stopped (the frame resampled, the detector's events if it was fed): one path, two ways in,
no frame handled twice. Turn events go to the call's `on_event`; `detach()` drops it when the
call ends (it is the call's bound method: no reference cycle is left).

A recorded call's recording (voice_gateway/recording.py) gets the caller's audio here as it
came, once per frame whichever way it came in, and the reply audio going out (`far`);
`clear_far()` tells it and the echo canceller that the client dropped what it had not played.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from voice_gateway.audio import StreamingResampler
from voice_gateway.echo.base import EchoCanceller
from voice_gateway.pipeline.overlap import BargeIn
from voice_gateway.recording import CallRecording
from voice_gateway.stt.base import STTStream
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import SpeechConfirmed, TurnEvent

FRAME_BYTES = 640  # 20 ms of 16 kHz PCM16
OnEvent = Callable[[TurnEvent], Awaitable[None]]


async def _nothing(ev: TurnEvent) -> None:
    """A detached input path's event handler."""


class InputPath:
    __slots__ = (
        "_began",
        "_began_events",
        "_began_frame",
        "_buf",
        "barge_in",
        "detector",
        "echo",
        "echo_on",
        "far_resampler",
        "in_frame_bytes",
        "label",
        "last_rx",
        "on_event",
        "recording",
        "resampler",
        "stt",
        "tap",
    )  # fmt: skip

    def __init__(
        self,
        rates: tuple[int, int],  # (input, output) sample rates of the transport
        detector: TurnDetector,
        echo: EchoCanceller,
        stt: STTStream,
        barge_in: BargeIn,
        on_event: OnEvent,
        label: str = "",
        recording: CallRecording | None = None,
        tap: Callable[[bytes], None] | None = None,
    ) -> None:
        input_rate, output_rate = rates
        self.detector, self.echo, self.stt, self.barge_in = detector, echo, stt, barge_in
        self.echo_on = echo.name != "off"
        self.on_event = on_event
        self.label = label  # the call's id (benchmarks count frames per call by it)
        self.recording = recording
        self.tap = tap  # sees every 16 kHz frame the turn detector does (voicemail detection)
        self.resampler = StreamingResampler(input_rate, 16000) if input_rate != 16000 else None
        self.far_resampler = (
            StreamingResampler(output_rate, 16000) if output_rate != 16000 else None
        )
        self.in_frame_bytes = input_rate // 50 * 2  # 20 ms at the input rate
        self.last_rx = time.monotonic()
        self._buf = b""  # 16 kHz audio short of a whole frame
        # the frame `now` began and declined: as it came, resampled, the detector's events
        # (None: not fed yet)
        self._began: bytes | None = None
        self._began_frame = b""
        self._began_events: list[TurnEvent] | None = None

    def far(self, pcm: bytes) -> None:
        """Reply audio going out (at the output rate): the echo canceller's reference."""
        if self.recording is not None:
            self.recording.played(pcm)
        if self.echo_on:
            self.echo.far(self.far_resampler.process(pcm) if self.far_resampler else pcm)

    def clear_far(self) -> None:
        """The client dropped the reply audio it had not played (barge-in)."""
        self.echo.clear()
        if self.recording is not None:
            self.recording.cut()

    def detach(self) -> None:
        """The call ended: let go of it (its event handler, barge-in's reply)."""
        self.on_event = _nothing
        self.barge_in.close()

    def now(self, pcm: bytes) -> bool:
        """The transport's audio sink: True if the frame was handled here."""
        det, frame = self.detector, pcm
        if self._buf or self._began is not None:
            return False
        if self.resampler is not None:  # a phone call's 8 kHz: the resampler's state moves on
            if len(pcm) != self.in_frame_bytes:  # only a 20 ms frame: the rest, as before
                return False  # (`receive`'s checks first: a frame it refuses never gets here)
            frame = self.resampler.process(pcm)
            self._began, self._began_frame, self._began_events = pcm, frame, None
        if len(frame) != FRAME_BYTES:
            return False
        self.last_rx, was_in = time.monotonic(), det.in_confirmed_utterance
        events = det.feed(frame, self.echo.near(frame) if self.echo_on else None)
        if self.tap is not None:
            self.tap(frame)
        if events or (det.in_confirmed_utterance and not (was_in and self.stt.feed_now(frame))):
            self._began, self._began_frame, self._began_events = pcm, frame, events
            return False
        self._began = None
        self.barge_in.frame()
        if self.recording is not None:
            self.recording.heard(pcm)
        return True

    async def audio(self, pcm: bytes) -> None:
        """Audio from `receive`, at the input rate (any length)."""
        if self.recording is not None:
            self.recording.heard(pcm)
        if self._began is not None:
            began, events = self._began, self._began_events
            self._began = self._began_events = None
            if began is pcm:  # `now` took it this far
                if events is not None:
                    await self._frame(self._began_frame, events)
                    return
                pcm = self._began_frame
            else:  # (not the frame `now` began: start afresh)
                pcm = self.resampler.process(pcm) if self.resampler is not None else pcm
        elif self.resampler is not None:
            pcm = self.resampler.process(pcm)
        elif not self._buf and len(pcm) == FRAME_BYTES:  # the common case: one 20 ms frame
            await self._frame(pcm, None)
            return
        buf = self._buf + pcm
        n = len(buf) - len(buf) % FRAME_BYTES
        self._buf = buf[n:]
        for i in range(0, n, FRAME_BYTES):
            await self._frame(buf[i : i + FRAME_BYTES], None)

    async def _frame(self, frame: bytes, events: list[TurnEvent] | None) -> None:
        # The echo canceller's output decides what is speech (the reply's echo is not);
        # STT gets the microphone as it was: AEC3 still learning the echo path suppressed a
        # caller talking over the reply by up to 29 dB (docs/operations.md, Turn-taking)
        det = self.detector
        if events is None:
            events = det.feed(frame, self.echo.near(frame) if self.echo_on else None)
            if self.tap is not None:
                self.tap(frame)
        # a confirmation carries the utterance so far (this frame included) to STT
        if det.in_confirmed_utterance and not any(isinstance(e, SpeechConfirmed) for e in events):
            await self.stt.feed(frame)
        for ev in events:
            await self.on_event(ev)
        self.barge_in.frame()
