"""One voice call: audio in -> VAD/turn-taking -> STT -> agent -> speech out, barge-in.

Everything runs in one asyncio.TaskGroup per call; when the caller leaves, every task of the
call (LLM stream, TTS, STT) is cancelled and what was said is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agents.approvals import Answer, ClientTool
from agents.memory_events import BlockChanged
from memory.models import AgentData, Source
from memory.orm import new_id
from voice_gateway.echo import create_canceller
from voice_gateway.logs import call_id
from voice_gateway.pipeline.approvals import CallApprovals
from voice_gateway.pipeline.audio import StreamingResampler
from voice_gateway.pipeline.call_end import (
    drain_call,
    publish_call_end,
    refuse_waiting,
    release,
    speak_cached,
    watch_idle,
    wind_down,
)
from voice_gateway.pipeline.callers import CallerRule, CallRefused
from voice_gateway.pipeline.overlap import BargeIn, Overlap, phrase_set
from voice_gateway.pipeline.reply import Reply, UserTurn
from voice_gateway.pipeline.services import APOLOGY, VoiceServices
from voice_gateway.pipeline.transport import (
    CLOSE_GOING_AWAY,
    CLOSE_NORMAL,
    CLOSE_NOT_FOUND,
    Answered,
    AudioIn,
    Closed,
    Control,
    Notes,
    Played,
    StartInfo,
    TextIn,
    Transport,
)
from voice_gateway.pipeline.utterance import Utterance, user_turn
from voice_gateway.stt.base import STTStream
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import (
    FalseStart,
    PauseStarted,
    SpeechConfirmed,
    SpeechStarted,
    SpeechStopped,
    TurnEvent,
)
from voice_gateway.turns.options import turn_options

log = logging.getLogger(__name__)

FRAME_BYTES = 640  # 20 ms of 16 kHz PCM16


class VoiceSession:
    def __init__(
        self,
        gw: Any,
        voice: VoiceServices,
        transport: Transport,
        agent: AgentData,
        *,
        caller: CallerRule | None = None,
    ) -> None:
        self.gw = gw
        self.caller = caller or CallerRule()
        self.identity_id: str | None = None
        self.conversation_gone = False  # deleted during the call: no call-end event either
        self.voice = voice
        self.transport = transport
        self.agent = agent
        self.agent_id = agent.id
        self.session_id = new_id("sess")
        self.conversation_id: str | None = None
        self.output_rate = 16000
        self.turns: asyncio.Queue[UserTurn | Utterance] = asyncio.Queue()
        self.busy = False
        self.reply: Reply | None = None
        self.reply_task: asyncio.Task[None] | None = None
        self.cancel_reason = "barge_in"
        self.pending_notes: list[str] = []
        self.carry_text = ""
        self.last_rx = time.monotonic()
        self.turn_count = 0
        self.utterance_turn_id = new_id("turn")  # of the utterance being spoken
        self._buf = b""
        self.in_frame_bytes = FRAME_BYTES  # 20 ms at the input rate
        self._fed: tuple[bytes, bytes, list[TurnEvent] | None] | None = None  # see audio_now
        # extra per-call tasks run in the call's task group (the route's quota watcher)
        self.watchers: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.ended = asyncio.Event()  # run() returned
        self.closing = False  # shutting down: queued and new turns are dropped
        self.last_played: tuple[str, int] = ("", 0)  # (item id, ms) of the last client mark
        self.approvals = CallApprovals(self.send)  # calls waiting for the caller or client
        self.client_tools: list[ClientTool] = []
        self._speech_start_ms = 0

    @property
    def source(self) -> Source:
        return self.transport.source

    async def send(self, type_: str, **fields: Any) -> None:
        await self.transport.send_event({"type": type_, **fields})

    async def error(self, code: str, message: str) -> None:
        await self.transport.error(code, message)

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        """Reply audio to the caller; it is also the echo canceller's reference."""
        if self.echo_on:
            self.echo.far(self.far_resampler.process(pcm) if self.far_resampler else pcm)
        await self.transport.send_audio(item_id, pcm)

    async def run(self, info: StartInfo | None = None) -> None:
        """Run the call. `info`: the transport was already started by the caller (Twilio,
        whose start message names the agent)."""
        info = info or await self.transport.start_within(self.voice.settings.idle_timeout_s)
        if info is None:
            return
        call_id.set(self.session_id)
        try:
            await self._setup(info)
        except CallRefused as exc:
            log.warning("call refused: %s", exc.message)
            await self.transport.error(exc.code, exc.message, fatal=True)
            await self.transport.close(exc.close_code, exc.message[:120])
            return
        self.gw.metrics.calls.labels(self.transport.source).inc()
        stt = self.voice.stt.open_stream(on_partial=self._partial, input_rate=self.input_rate)
        self.stt: STTStream = stt
        reason = "gone"
        try:
            async with asyncio.TaskGroup() as tg:
                self.tg = tg
                helpers = [
                    tg.create_task(self._process_turns()),
                    tg.create_task(self._watch_memory()),
                    tg.create_task(watch_idle(self)),
                    *(tg.create_task(watch()) for watch in self.watchers),
                ]
                if self.agent.greeting:
                    await self.turns.put(await self._greeting())
                # own task for the input loop: a frame resumes a short chain (ASGI's is ~12 deep)
                reason = await tg.create_task(self._input())
                await wind_down(self, reason)
                for task in helpers:
                    task.cancel()
        finally:
            await stt.aclose()
            await refuse_waiting(
                self.gw, self.agent_id, self.conversation_id, self.source, self.approvals.hung_up()
            )
            self.gw.metrics.echo_frames.inc(self.echo.cancelled_s)
            if self.turn_count and not self.conversation_gone:
                await publish_call_end(self)
            if reason == "end":
                await self.transport.close(CLOSE_NORMAL, "session ended")
            self.ended.set()
            log.info("call ended (%s) after %d turns", reason, self.turn_count)
            release(self)

    async def _setup(self, info: StartInfo) -> None:
        self.input_rate, self.output_rate = info.input_rate, info.output_rate
        self.in_frame_bytes = info.input_rate // 50 * 2
        self.resampler = (
            StreamingResampler(info.input_rate, 16000) if info.input_rate != 16000 else None
        )
        s = self.voice.settings
        options, complaints = turn_options(s, self.transport.source, info.extra)
        for message in complaints:
            await self.transport.error("invalid_option", f"{message}; using the default")
        eot = self.voice.new_end_of_turn(options.config)
        self.detector = TurnDetector(self.voice.new_vad(), options.config, eot)
        self.echo = create_canceller(options.echo)
        self.echo_on = self.echo.name != "off"
        self.far_resampler = (
            StreamingResampler(info.output_rate, 16000) if info.output_rate != 16000 else None
        )
        self.barge_in = BargeIn(
            s.barge_in_check_ms,
            s.barge_in_max_ms,
            phrase_set(s.backchannels),
            self.echo_on,
            now_ms=lambda: self.detector.last_voiced_ms,
            playing=self._reply_playing,
            reply_text=self._reply_text,
            reply=lambda: self.reply,
            interrupt=self.interrupt,
            speculate=lambda: self.stt.speculate(),
            latest=lambda: self.stt.speculation(),
            spawn=lambda coro: self.tg.create_task(coro),
            on_ignored=self._ignored,
            echo=self.echo,
        )
        opened = await self.caller.open(self.gw.memory, self.agent, info, self.transport.source)
        self.conversation_id = opened.conversation.id
        self.identity_id = opened.identity_id
        self.client_tools = [ClientTool(**t) for t in info.extra.get("client_tools", [])]
        await self.send(
            "session.started",
            session_id=self.session_id,
            conversation_id=self.conversation_id,
            agent_id=self.agent_id,
            input_audio={"encoding": "pcm16", "sample_rate": info.input_rate},
            output_audio={"encoding": "pcm16", "sample_rate": info.output_rate},
            **self.detector.options,
            echo_cancellation=self.echo_on,
        )

    async def _input(self) -> str:
        self.transport.audio_sink(self.audio_now)
        try:
            return await self._read()
        finally:
            self.transport.audio_sink(None)

    def audio_now(self, pcm: bytes) -> bool:
        """The transport's audio sink (Transport.audio_sink): a 20 ms frame that makes no turn
        event (most frames; in an utterance, if STT takes it at once: `feed_now`) is handled
        here, without waking the input task (docs/benchmarks.md, issue 20). Any other goes on
        through `receive`; `_audio` then picks up from what was done here (`_fed`: the frame
        as it came, resampled to 16 kHz, and the detector's events if it was fed)."""
        det, frame = self.detector, pcm
        if self._buf or self._fed is not None:
            return False
        if self.resampler is not None:  # a phone call's 8 kHz: the resampler's state moves on
            if len(pcm) != self.in_frame_bytes:  # only a 20 ms frame: the rest, as before
                return False  # (`receive`'s checks first: a frame it refuses never gets here)
            frame = self.resampler.process(pcm)
            self._fed = (pcm, frame, None)
        if len(frame) != FRAME_BYTES:
            return False
        self.last_rx, was_in = time.monotonic(), det.in_confirmed_utterance
        events = det.feed(frame, self.echo.near(frame) if self.echo_on else None)
        if events or (det.in_confirmed_utterance and not (was_in and self.stt.feed_now(frame))):
            self._fed = (pcm, frame, events)
            return False
        self._fed = None
        self.barge_in.frame()
        return True

    async def _read(self) -> str:
        while True:
            item = await self.transport.receive()
            self.last_rx = time.monotonic()
            if isinstance(item, AudioIn):
                await self._audio(item.pcm)
            elif isinstance(item, TextIn):
                self.interrupt("barge_in")
                await self.send("transcript.final", turn_id=(tid := new_id("turn")), text=item.text)
                await self.turns.put(UserTurn(item.text, tid, notes=self.take_notes()))
            elif isinstance(item, Played):
                self.last_played = (item.item_id, item.played_ms)
                if self.reply is not None and self.reply.item_id == item.item_id:
                    self.reply.client_played_ms = max(
                        item.played_ms, self.reply.client_played_ms or 0
                    )
            elif isinstance(item, Notes):
                self.pending_notes += item.notes
            elif isinstance(item, Answered):
                await self._answered(item.answer)
            elif isinstance(item, Control):
                if item.kind == "cancel":
                    self.interrupt("client")
                else:
                    return "end"
            elif isinstance(item, Closed):
                return "idle" if item.code == CLOSE_GOING_AWAY else "gone"

    async def _audio(self, pcm: bytes) -> None:
        fed = self._fed
        if fed is not None and fed[0] is pcm:  # audio_now took it this far
            if fed[2] is not None:
                await self._frame(fed[1])
                return
            self._fed, pcm = None, fed[1]
        elif self.resampler is not None:
            pcm = self.resampler.process(pcm)
        elif not self._buf and len(pcm) == FRAME_BYTES:  # the common case: one 20 ms frame
            await self._frame(pcm)
            return
        buf = self._buf + pcm
        n = len(buf) - len(buf) % FRAME_BYTES
        self._buf = buf[n:]
        for i in range(0, n, FRAME_BYTES):
            await self._frame(buf[i : i + FRAME_BYTES])

    async def _frame(self, frame: bytes) -> None:
        # The echo canceller's output decides what is speech (the reply's echo is not);
        # STT gets the microphone as it was: AEC3 still learning the echo path suppressed a
        # caller talking over the reply by up to 29 dB (docs/operations.md, Turn-taking)
        fed, self._fed = self._fed, None
        if fed is not None and fed[1] is frame and fed[2] is not None:  # audio_now fed it
            events = fed[2]
        else:
            events = self.detector.feed(frame, self.echo.near(frame) if self.echo_on else None)
        # a confirmation carries the utterance so far (this frame included) to STT
        if self.detector.in_confirmed_utterance and not any(
            isinstance(e, SpeechConfirmed) for e in events
        ):
            await self.stt.feed(frame)
        for ev in events:
            await self._turn_event(ev)
        self.barge_in.frame()

    async def _turn_event(self, ev: object) -> None:
        if isinstance(ev, SpeechStarted):
            self._speech_start_ms = ev.at_ms
            await self.send("speech.started", at_ms=ev.at_ms)
        elif isinstance(ev, SpeechConfirmed):
            await self.stt.feed(ev.audio)
            self.barge_in.confirmed(self._speech_start_ms)  # over a reply: judged first
        elif isinstance(ev, PauseStarted):
            d = self.detector
            spec = self.stt.speculate(d.speculation_pad_ms, retry_looped=not self._reply_playing())
            if spec is not None:
                d.follow(ev.pause, spec, final=self.stt.speculation_final)
        elif isinstance(ev, SpeechStopped):
            await self.send("speech.stopped", at_ms=ev.at_ms)
            now = time.monotonic()
            lag_s = (self.detector.now_ms - ev.at_ms) / 1000
            self.gw.metrics.turn_ended(ev.verdict)
            # finish() now: the next utterance's audio must not leak into this transcript
            transcript = self.tg.create_task(self._finish_stt(ev.speculated))
            turn_id, self.utterance_turn_id = self.utterance_turn_id, new_id("turn")
            verdict = ev.verdict.as_dict() if ev.verdict is not None else None
            taking = {"end_of_turn_ms": float(ev.end_of_turn_ms), "end_of_turn": verdict}
            u = Utterance(transcript, turn_id, now - lag_s, now, taking)
            if (overlap := self.barge_in.ended()) is not None:
                u.judge = self.tg.create_task(self._judge(u, overlap))
            await self.turns.put(u)
        elif isinstance(ev, FalseStart):
            log.debug("false start at %d ms ignored", ev.at_ms)

    def _reply_playing(self) -> bool:
        r, task = self.reply, self.reply_task
        playing = r is not None and not r.finished and r.speaker.first_audio_at is not None
        return playing and task is not None and not task.done()

    def _reply_text(self) -> str:
        return " ".join(self.reply.texts.values()) if self.reply is not None else ""

    async def _ignored(self, turn_id: str, reason: str, text: str) -> None:
        self.gw.metrics.speech_ignored.labels(reason).inc()
        await self.send("speech.ignored", turn_id=turn_id, reason=reason, text=text)

    async def _judge(self, u: Utterance, overlap: Overlap) -> None:
        u.ignored = await self.barge_in.judge_final(u.transcript, u.turn_id, overlap)

    def interrupt(self, reason: str) -> None:
        """Barge-in / cancel: stop the reply now (the reply task stores what was heard)."""
        task = self.reply_task
        if task is None or task.done() or (self.reply is not None and self.reply.finished):
            return
        self.cancel_reason = reason
        task.cancel()

    async def drain(self, deadline: float) -> None:
        """Server shutdown (pipeline/call_end.py `drain_call`)."""
        await drain_call(self, deadline)

    async def _process_turns(self) -> None:
        while True:
            item = await self.turns.get()
            if self.closing:
                continue
            self.busy = True
            try:
                turn = await user_turn(self, item) if isinstance(item, Utterance) else item
                if turn is None:
                    continue
                if self.detector.speaking and not turn.greeting:
                    # the caller is talking again: fold this utterance into the next one
                    self.carry_text = turn.text
                    continue
                if turn.answers is None and not turn.greeting:
                    answers = self.approvals.spoken(turn.text)  # yes / no to a read-back
                    if isinstance(answers, str):
                        await self.speak_phrase(answers)  # re-asked once
                        continue
                    turn.answers = answers
                await self._respond(turn)
            finally:
                self.busy = False

    async def _answered(self, answer: Answer) -> None:
        """`approval.response` / `tool.result`: the run goes on once nothing else waits; an
        answer for nothing waiting is an error event, and the call goes on."""
        got = self.approvals.answered(answer)
        if isinstance(got, str):
            await self.transport.error("unknown_call", got)
        elif got:
            self.interrupt("client")
            await self.turns.put(UserTurn("", new_id("turn"), answers=got))

    async def _finish_stt(self, speculated: bool = False) -> str | Exception:
        """STT result or its error (a task in the call's TaskGroup must not raise)."""
        try:
            return await self.stt.finish(speculated=speculated)
        except Exception as exc:
            return exc

    async def _partial(self, text: str) -> None:
        await self.send("transcript.partial", turn_id=self.utterance_turn_id, text=text)

    async def _respond(self, turn: UserTurn) -> None:
        reply = self.reply = Reply(self, turn)
        task = self.reply_task = self.tg.create_task(self._run_reply(reply))
        await asyncio.wait([task])
        if task.cancelled():
            if self.cancel_reason == "barge_in":
                self.gw.metrics.barge_ins.inc()
            self.echo.clear()  # the caller will not hear the rest: no longer a reference
            await self.transport.clear_audio()
            await reply.cancelled(self.cancel_reason)
        self.turn_count += 0 if turn.greeting else 1
        self.reply = self.reply_task = None
        if reply.conversation_gone:  # deleted meanwhile: nothing of the turn was stored
            self.conversation_gone = True
            await self.transport.error(
                "conversation_not_found", "this call's conversation was deleted", fatal=True
            )
            await self.transport.close(CLOSE_NOT_FOUND, "conversation deleted")

    async def _run_reply(self, reply: Reply) -> None:
        """The reply task: a failure is reported to the caller, never tears down the call."""
        try:
            await reply.run()
        except Exception:
            log.exception("reply failed")
            await self.transport.error("internal_error", "the reply failed; please try again")
            await self.speak_phrase(APOLOGY)

    async def speak_phrase(self, text: str) -> str | None:
        """A cached phrase (an apology, a goodbye) as an audio item of its own; returns the
        item id (None if it could not be synthesized); never raises."""
        return await speak_cached(self, self.voice, text)

    async def _greeting(self) -> UserTurn:
        from agents.greeting import render_greeting

        text = await render_greeting(self.gw.memory, self.agent, self.identity_id)
        return UserTurn(text, new_id("turn"), greeting=True)

    def take_notes(self) -> list[str]:
        notes, self.pending_notes = self.pending_notes, []
        return notes

    async def _watch_memory(self) -> None:
        async with self.gw.memory_events.subscribe(self.agent_id, self.identity_id) as q:
            while True:
                ev: BlockChanged = await q.get()
                await self.send("memory.updated", label=ev.label, version=ev.version)
