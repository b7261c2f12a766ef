"""One voice call: audio in -> VAD/turn-taking -> STT -> agent -> speech out, barge-in.

The call owns its parts. Those of a running call are built together when it starts
(`CallParts`): the turn detector, the echo canceller, the STT stream, the call's task group,
barge-in (pipeline/overlap.py) and the input path that feeds them (pipeline/input.py:
resampling, echo cancellation, the turn detector, STT feeding; one entry point). It also owns
the approvals waiting on the caller, and a handle per reply (pipeline/reply.py `Reply`:
barge-in, approvals, the drain and `interrupt` act on it) or per phrase (pipeline/playout.py).
What the call reads of the gateway's settings is `VoiceConfig` (pipeline/services.py). The
turns the caller takes are answered one at a time (`_process_turns`).

Everything runs in one asyncio.TaskGroup per call; when the caller leaves, every task of the
call (LLM stream, TTS, STT) is cancelled and what was said is stored. Parts that call back
into the call (the input path's event handler, barge-in's reply) let go of it when the call
ends, so the call dies by reference counting (tests/e2e/test_call_release.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.approvals import Answer, ClientTool
from agents.memory_events import BlockChanged
from memory.ids import new_id
from memory.models import AgentData, Source
from voice_gateway.echo import create_canceller
from voice_gateway.echo.base import EchoCanceller
from voice_gateway.logs import call_id
from voice_gateway.pipeline.approvals import CallApprovals
from voice_gateway.pipeline.call_control import SessionCallControl
from voice_gateway.pipeline.call_end import (
    call_end_event,
    drain_call,
    publish_call_end,
    refuse_waiting,
    speak_cached,
    wind_down,
)
from voice_gateway.pipeline.callers import CallerRule, CallRefused
from voice_gateway.pipeline.input import InputPath
from voice_gateway.pipeline.overlap import BargeIn, BargeInRules, Overlap
from voice_gateway.pipeline.phone_drain import drain_phone
from voice_gateway.pipeline.playout import Playout
from voice_gateway.pipeline.reply import Reply, UserTurn
from voice_gateway.pipeline.sentences import last_sentence
from voice_gateway.pipeline.services import APOLOGY, STT_APOLOGY, VoiceServices
from voice_gateway.pipeline.transport import (
    CLOSE_GOING_AWAY,
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
from voice_gateway.pipeline.utterance import Partials, Utterance
from voice_gateway.recordings import close_recording, open_recording
from voice_gateway.stt.base import STTError, STTStream
from voice_gateway.turns.detector import TurnDetector
from voice_gateway.turns.events import (
    FalseStart,
    PauseStarted,
    SpeechConfirmed,
    SpeechStarted,
    SpeechStopped,
)

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway
    from voice_gateway.pipeline.voicemail import Voicemail

log = logging.getLogger(__name__)
# why the input ended -> the call record's end reason
ENDED_BY = {"gone": "caller_hung_up", "end": "caller_ended", "idle": "idle"}


@dataclass(frozen=True, slots=True)
class CallParts:
    """A running call's parts, built together when it starts (`VoiceSession.run`): the turn
    detector, the echo canceller, the STT stream, the task group the call's tasks run in,
    barge-in, and the input path that feeds them frame by frame."""

    detector: TurnDetector
    echo: EchoCanceller
    stt: STTStream
    tg: asyncio.TaskGroup
    barge_in: BargeIn
    input: InputPath


class VoiceSession:
    def __init__(
        self,
        gw: Gateway,
        voice: VoiceServices,
        transport: Transport,
        agent: AgentData,
        *,
        caller: CallerRule | None = None,
        first_message: str | None = None,
    ) -> None:
        self.gw = gw
        # the call's first words instead of the agent's greeting (an outbound call's)
        self.first_message = first_message
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
        self.closing = False  # shutting down: queued and new turns are dropped
        self.reply: Reply | None = None  # the reply under way (its handle)
        self.sent: Playout | None = None  # the last reply's audio, all sent, still being heard
        self.phrase: Playout | None = None  # the last cached phrase played (its playout)
        self.pending_notes: list[str] = []
        self.carry_text = ""
        self.turn_count = 0
        self.partials = Partials(transport)
        # extra per-call tasks run in the call's task group (the route's quota watcher)
        self.watchers: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self.ended = asyncio.Event()  # run() returned
        self.approvals = CallApprovals(transport)  # calls waiting for the caller or client
        self.client_tools: list[ClientTool] = []
        self._speech_start_ms = 0
        self._parts: CallParts | None = None  # built when the call starts
        self.end_reason: str | None = None  # how the call ended (its call record's end reason)
        self.control = SessionCallControl(self)  # the call tools' way to end or move the call
        self.voicemail: Voicemail | None = None  # an outbound call's (pipeline/voicemail.py)

    @property
    def parts(self) -> CallParts:
        """The running call's parts (`run` built them)."""
        assert self._parts is not None, "the call has not started"
        return self._parts

    @property
    def source(self) -> Source:
        return self.transport.source

    async def send(self, type_: str, **fields: Any) -> None:
        await self.transport.send_event({"type": type_, **fields})

    async def error(self, code: str, message: str) -> None:
        await self.transport.error(code, message)

    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        """Reply audio to the caller; it is also the echo canceller's reference."""
        if self._parts is not None:
            self._parts.input.far(pcm)
        await self.transport.send_audio(item_id, pcm)

    async def run(self, info: StartInfo | None = None) -> None:
        """Run the call. `info`: the transport was already started by the caller (Twilio,
        whose start message names the agent)."""
        info = info or await self.transport.start_within(self.voice.config.idle_timeout_s)
        if info is None:
            return
        call_id.set(self.session_id)
        try:
            detector, echo = await self._setup(info)
        except CallRefused as exc:
            log.warning("call refused: %s", exc.message)
            await self.transport.error(exc.code, exc.message, fatal=True)
            await self.transport.close(exc.close_code, exc.message[:120])
            return
        self.gw.metrics.calls.labels(self.transport.source).inc()
        stt = self.voice.stt.open_stream(on_partial=self.partials.send, input_rate=info.input_rate)
        rec = await open_recording(self.gw, self, info)  # (and its consent message queued)
        reason = "gone"
        try:
            async with asyncio.TaskGroup() as tg:
                c = self.voice.config
                echo_on = echo.name != "off"
                rules = BargeInRules(
                    c.barge_in_check_ms, c.barge_in_max_ms, c.backchannels, echo_on
                )
                barge_in = BargeIn(rules, detector, stt, tg, echo)
                rates = (info.input_rate, info.output_rate)
                vm = self.voicemail.frame if self.voicemail else None
                inp = InputPath(
                    rates, detector, echo, stt, barge_in, self._turn_event, self.session_id, rec, vm
                )
                self._parts = CallParts(detector, echo, stt, tg, barge_in, inp)
                helpers = [
                    tg.create_task(self._process_turns()),
                    tg.create_task(self._watch_memory()),
                    tg.create_task(self._watch_idle(inp)),
                    *(tg.create_task(watch()) for watch in self.watchers),
                ]
                if self.first_message or self.agent.greeting:
                    await self.turns.put(await self._greeting())
                # own task for the input loop: a frame resumes a short chain (ASGI's is ~12 deep)
                reason = await tg.create_task(self._input(inp))
                self.end_reason = self.control.ending or ENDED_BY.get(reason, reason)
                await wind_down(self, reason)
                for task in helpers:
                    task.cancel()
        finally:
            await stt.aclose()
            await refuse_waiting(
                self.gw, self.agent_id, self.conversation_id, self.source, self.approvals.hung_up()
            )
            self.gw.metrics.echo_frames.inc(echo.cancelled_s)
            if self.turn_count and not self.conversation_gone:
                event = call_end_event(
                    self.agent_id,
                    self.conversation_id,
                    self.identity_id,
                    self.session_id,
                    self.source,
                )
                await publish_call_end(self.gw.memory, event)
            if reason == "end":
                await self.transport.end("caller_ended")  # session.ended, close 1000
            self.ended.set()
            log.info("call ended (%s) after %d turns", reason, self.turn_count)
            # what calls back into the call lets go of it: it dies by reference counting
            # (hundreds of hang-ups a minute otherwise wait for a full collection:
            # docs/benchmarks.md, `voice_soak`)
            self.control.detach()
            if self._parts is not None:
                self._parts.input.detach()
            await close_recording(self.gw, rec)  # last: the file is written off the loop

    async def _setup(self, info: StartInfo) -> tuple[TurnDetector, EchoCanceller]:
        """The call's conversation opened and `session.started` sent: its detector and echo
        canceller, as the gateway's turn settings and the call's options make them."""
        self.output_rate = info.output_rate
        options, complaints = self.voice.config.turn_options(self.transport.source, info.extra)
        for message in complaints:
            await self.transport.error("invalid_option", f"{message}; using the default")
        eot = self.voice.new_end_of_turn(options.config)
        detector = TurnDetector(self.voice.new_vad(), options.config, eot)
        echo = create_canceller(options.echo)
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
            **detector.options,
            echo_cancellation=echo.name != "off",
        )
        return detector, echo

    async def _input(self, inp: InputPath) -> str:
        self.transport.audio_sink(inp.now)
        try:
            return await self._read(inp)
        finally:
            self.transport.audio_sink(None)

    async def _read(self, inp: InputPath) -> str:
        while True:
            item = await self.transport.receive()
            inp.last_rx = time.monotonic()
            if isinstance(item, AudioIn):
                await inp.audio(item.pcm)
            elif isinstance(item, TextIn):
                self.interrupt("barge_in")
                await self.send("transcript.final", turn_id=(tid := new_id("turn")), text=item.text)
                await self.turns.put(UserTurn(item.text, tid, notes=self.take_notes()))
            elif isinstance(item, Played):
                for out in (self.reply.playout if self.reply else None, self.sent, self.phrase):
                    if out is not None and out.item_id == item.item_id:
                        out.mark(item.played_ms)
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

    async def _turn_event(self, ev: object) -> None:
        p = self.parts
        if isinstance(ev, SpeechStarted):
            self._speech_start_ms = ev.at_ms
            await self.send("speech.started", at_ms=ev.at_ms)
        elif isinstance(ev, SpeechConfirmed):
            await p.stt.feed(ev.audio)
            p.barge_in.confirmed(self._speech_start_ms)  # over a reply: judged first
        elif isinstance(ev, PauseStarted):
            d, stt = p.detector, p.stt
            spec = stt.speculate(d.speculation_pad_ms, retry_looped=not self._reply_playing())
            if spec is not None:
                d.follow(ev.pause, spec, final=stt.speculation_final)
        elif isinstance(ev, SpeechStopped):
            await self.send("speech.stopped", at_ms=ev.at_ms)
            now = time.monotonic()
            lag_s = (p.detector.now_ms - ev.at_ms) / 1000
            self.gw.metrics.turn_ended(ev.verdict)
            # finish() now: the next utterance's audio must not leak into this transcript
            transcript = p.tg.create_task(self._finish_stt(ev.speculated))
            turn_id = self.partials.next()
            verdict = ev.verdict.as_dict() if ev.verdict is not None else None
            taking = {"end_of_turn_ms": float(ev.end_of_turn_ms), "end_of_turn": verdict}
            u = Utterance(transcript, turn_id, now - lag_s, now, taking)
            if (overlap := p.barge_in.ended()) is not None:
                u.judge = p.tg.create_task(self._judge(u, overlap))
            await self.turns.put(u)
        elif isinstance(ev, FalseStart):
            log.debug("false start at %d ms ignored", ev.at_ms)

    def _reply_playing(self) -> bool:
        return self.reply is not None and self.reply.playing

    async def _judge(self, u: Utterance, overlap: Overlap) -> None:
        ignored = await self.parts.barge_in.judge_final(u.transcript, overlap)
        if ignored is not None:
            reason, text = ignored
            u.ignored = True
            self.gw.metrics.speech_ignored.labels(reason).inc()
            await self.send("speech.ignored", turn_id=u.turn_id, reason=reason, text=text)

    def interrupt(self, reason: str) -> None:
        """Barge-in / cancel: stop the reply under way, if any (`Reply.interrupt`)."""
        if self.reply is not None:
            self.reply.interrupt(reason)

    def settled(self) -> bool:
        """No turn is being answered or waits to be."""
        return not self.busy and self.turns.empty()

    async def drain(self, deadline: float) -> None:
        """Server shutdown (pipeline/call_end.py `drain_call`); a phone call, which cannot
        reconnect, goes on and then hears a goodbye (pipeline/phone_drain.py)."""
        if self.transport.source == "phone":
            await drain_phone(self, deadline)
        else:
            await drain_call(self, deadline)

    async def _process_turns(self) -> None:
        while True:
            item = await self.turns.get()
            if self.closing:
                continue
            self.busy = True
            try:
                turn = await self._user_turn(item) if isinstance(item, Utterance) else item
                if turn is None:
                    continue
                if self.parts.detector.speaking and not turn.greeting:
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
            return await self.parts.stt.finish(speculated=speculated)
        except Exception as exc:
            return exc

    async def _user_turn(self, u: Utterance) -> UserTurn | None:
        """The turn `u` becomes (`transcript.final` sent), or None (ignored, empty, failed:
        the caller is told and hears an apology)."""
        heard = await u.heard()
        if heard is None:
            return None
        if isinstance(heard, Exception):
            if not isinstance(heard, STTError):
                log.error("speech-to-text failed", exc_info=heard)
            provider = heard.provider if isinstance(heard, STTError) else self.voice.stt.name
            self.gw.metrics.provider_error("stt", provider)
            await self.transport.error("stt_error", f"speech-to-text failed: {heard}")
            await self.speak_phrase(STT_APOLOGY)
            return None
        text, stt_ms = heard
        if self.carry_text:
            text, self.carry_text = f"{self.carry_text} {text}".strip(), ""
        if not text:
            return None
        await self.send("transcript.final", turn_id=u.turn_id, text=text)
        if self.voicemail is not None and self.voicemail.heard(text):
            return None  # a machine's greeting is not answered
        return u.turn(text, stt_ms, self.take_notes())

    async def _respond(self, turn: UserTurn) -> None:
        p = self.parts
        reply = self.reply = p.barge_in.reply = Reply(self, turn)
        task = reply.start(p.tg, self._run_reply(reply))
        await asyncio.wait([task])
        if task.cancelled():
            reason = reply.interrupted or "barge_in"
            if reason == "barge_in":
                self.gw.metrics.barge_ins.inc()
            p.input.clear_far()  # the caller will not hear the rest (echo, recording)
            await self.transport.clear_audio()
            await reply.cancelled(reason)
        self.turn_count += 0 if turn.greeting else 1
        self.reply = p.barge_in.reply = None
        self.sent = reply.playout  # its marks still come (end_call waits for the last one)
        await self.control.after_reply(reply, cut=task.cancelled())
        p.detector.question = last_sentence(reply.heard())  # what the caller's words answer
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

    async def speak_phrase(self, text: str) -> Playout | None:
        """A cached phrase (an apology, a goodbye) as an audio item of its own; returns its
        playout (`wait()`: heard to the end; None if it could not be synthesized); never
        raises."""
        self.phrase = await speak_cached(self, self.voice.phrases, text)
        return self.phrase

    async def _watch_idle(self, inp: InputPath) -> None:
        """Close a call that sent nothing for VG_IDLE_TIMEOUT_S (1001); a reply in progress
        is activity too."""
        while True:
            timeout = self.voice.config.idle_timeout_s
            await asyncio.sleep(min(1.0, timeout / 4))
            if self.busy:
                inp.last_rx = time.monotonic()
            if time.monotonic() - inp.last_rx > timeout:
                await self.transport.close(CLOSE_GOING_AWAY, "idle timeout")
                return

    async def _greeting(self) -> UserTurn:
        from agents.greeting import render_greeting

        text = self.first_message or await render_greeting(
            self.gw.memory, self.agent, self.identity_id
        )
        return UserTurn(text, new_id("turn"), greeting=True)

    def take_notes(self) -> list[str]:
        notes, self.pending_notes = self.pending_notes, []
        return notes

    async def _watch_memory(self) -> None:
        async with self.gw.memory_events.subscribe(self.agent_id, self.identity_id) as q:
            while True:
                ev: BlockChanged = await q.get()
                await self.send("memory.updated", label=ev.label, version=ev.version)
