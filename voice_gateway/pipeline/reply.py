"""One agent turn spoken to the caller: agent events -> sentences -> speech, with filler,
apologies on provider failure, metrics, and truncation to what was heard on barge-in.

`Reply` is also the reply's handle (as LiveKit's SpeechHandle): barge-in, approvals, the drain
and call control act on it, never on the call's fields. `interrupt(reason)` cuts it (a no-op
once all its audio is sent, or when `allow_interruptions` is off); `wait_for_playout()`
resolves once the caller has heard it (pipeline/playout.py) or it was cut; `playing`, `text`
(so far), `heard()` (what the caller heard), `interrupted` (why it was cut) and `done()`.
The call runs it as a task of its task group (`start`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agents.approvals import Answer, ClientTool
from agents.events import (
    ApprovalRequest,
    RunDone,
    TextDelta,
    ToolArgsDelta,
    ToolCallReady,
    ToolResult,
)
from agents.loop import TurnInput
from agents.tools.call_control import CallControl
from agents.voice import VOICE, FillerDetector
from memory.ids import new_id, utcnow
from memory.models import AgentData, NotFound, Source, TranscriptEvent
from memory.runs import TurnMetrics
from voice_gateway.pipeline.approvals import CallApprovals
from voice_gateway.pipeline.overlap import Spawner
from voice_gateway.pipeline.playout import Playout
from voice_gateway.pipeline.sentences import SentenceSplitter
from voice_gateway.pipeline.services import APOLOGY, VoiceServices
from voice_gateway.pipeline.speech import Speaker, heard_text

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)
READBACK = "readback:"  # texts key of an approval's spoken read-back


@dataclass(slots=True)
class UserTurn:
    text: str
    turn_id: str
    notes: list[str] = field(default_factory=list)
    speech_end_at: float | None = None  # monotonic time the caller stopped speaking
    endpointing_ms: float = 0.0
    stt_ms: float = 0.0
    received_at: float = field(default_factory=time.monotonic)
    greeting: bool = False
    answers: list[Answer] | None = None  # the caller's (or app's) answer to waiting calls
    turn_taking: dict[str, Any] = field(default_factory=dict)  # end_of_turn_ms, verdict, ...


class ReplyHost(Protocol):
    """What a reply needs from its call (VoiceSession in pipeline/session.py provides it)."""

    gw: Gateway  # the gateway's loop, memory and metrics
    voice: VoiceServices
    agent: AgentData
    agent_id: str
    conversation_id: str | None
    identity_id: str | None
    output_rate: int
    approvals: CallApprovals  # calls waiting for the caller's (or the app's) answer
    client_tools: list[ClientTool]  # tools the client runs (session.start client_tools)

    @property
    def source(self) -> Source: ...

    @property
    def control(self) -> CallControl:
        """What the call tools do to the call (pipeline/call_control.py)."""
        ...

    async def send(self, type_: str, **fields: Any) -> None: ...

    async def send_audio(self, item_id: str, pcm: bytes) -> None: ...

    async def error(self, code: str, message: str) -> None: ...


class Reply:
    def __init__(
        self, session: ReplyHost, turn: UserTurn, *, allow_interruptions: bool = True
    ) -> None:
        self.s = session
        self.turn = turn
        self.item_id = new_id("item")
        self.allow_interruptions = allow_interruptions
        self.task: asyncio.Task[None] | None = None  # the reply's task (`start`)
        self.interrupted: str | None = None  # why it was cut: barge_in, client, ...
        self.playout = Playout(self.item_id, session.output_rate)  # what the caller has heard of it
        self.started_at = utcnow()
        self.stop_reason = "end_turn"
        self.texts: dict[str, str] = {}  # assistant message id -> generated text
        self.speaker = Speaker(
            session.voice.tts,
            session.output_rate,
            self._send_audio,
            on_first_audio=self._first_audio,
            on_tts_error=self._tts_failed,
        )
        self.t_llm_start: float | None = None
        self.t_llm_first: float | None = None
        self.t_first_tool: float | None = None
        self.filler_at: float | None = None
        self.finished = False  # all audio sent; only bookkeeping left
        self.conversation_gone = False  # deleted during the turn: nothing of it is stored

    def start(self, tasks: Spawner, body: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run `body` (which runs `run()`) as the reply's task in `tasks`."""
        self.task = tasks.create_task(body)
        return self.task

    def interrupt(self, reason: str) -> bool:
        """Stop the reply now (the call stores what was heard, `cancelled`); False: nothing
        to stop (not started, over, all its audio sent) or it may not be interrupted."""
        task = self.task
        if task is None or task.done() or self.finished or not self.allow_interruptions:
            return False
        self.interrupted = reason
        task.cancel()
        return True

    def done(self) -> bool:
        return self.task is not None and self.task.done()

    @property
    def playing(self) -> bool:
        """Its audio is going out (started, not all sent, not cut)."""
        task = self.task
        return (
            not self.finished
            and self.speaker.first_audio_at is not None
            and task is not None
            and not task.done()
        )

    @property
    def text(self) -> str:
        """The reply's text so far (what its echo may say)."""
        return " ".join(self.texts.values())

    def played(self, played_ms: int) -> None:
        """The client's `Played` mark for this reply's item."""
        self.playout.mark(played_ms)

    @property
    def played_ms(self) -> int:
        """How much the caller heard: the client's mark, else the speaker's estimate."""
        marked = self.playout.marked_ms
        return round(self.speaker.played_estimate_ms()) if marked is None else marked

    def heard(self) -> str:
        """The reply's words the caller heard so far."""
        heard = heard_text(self.speaker.segments, self.played_ms)
        return " ".join(t for t in heard.values() if t)

    async def wait_for_playout(self) -> None:
        """Until the caller has heard the whole reply, or it was cut."""
        await self.playout.wait()

    async def wait_for_said(self) -> None:
        """Until the caller has heard what the reply has said so far (mid-reply: the
        announcement of a transfer), or it was cut."""
        await self.speaker.spoken()
        await self.playout.reach(self.playout.sent_ms)

    async def _send_audio(self, pcm: bytes) -> None:
        self.playout.audio(len(pcm))
        await self.s.send_audio(self.item_id, pcm)

    async def _first_audio(self) -> None:
        await self.s.send(
            "response.audio.started", item_id=self.item_id, sample_rate=self.s.output_rate
        )

    async def run(self) -> None:
        """The task body. Cancelling it is a barge-in; call `cancelled()` afterwards."""
        try:
            await self._run()
        finally:
            if not self.finished:
                self.playout.cut()  # (cut or failed: nothing more of it plays)
            self.speaker.detach()  # its callbacks are this reply's methods: no cycle is left

    async def _run(self) -> None:
        await self.s.send("response.started", turn_id=self.turn.turn_id, item_id=self.item_id)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.speaker.run())
            try:
                if self.turn.greeting:
                    self.texts[self.item_id] = self.turn.text  # shown like any reply text
                    await self.s.send(
                        "response.text.delta", item_id=self.item_id, text=self.turn.text
                    )
                    self.speaker.say(self.turn.text, None)
                else:
                    await self._agent_turn()
            finally:
                self.speaker.close()
        # all audio is sent: a barge-in from now on must not cancel the storing of this turn
        self.finished = True
        self.playout.finish()
        text = " ".join(t for t in self.texts.values() if t)
        await self.s.send("response.text.done", item_id=self.item_id, text=text)
        await self.s.send(
            "response.audio.done", item_id=self.item_id, duration_ms=round(self.speaker.sent_ms)
        )
        await self.s.send(
            "response.done",
            turn_id=self.turn.turn_id,
            item_id=self.item_id,
            stop_reason=self.stop_reason,
        )
        metrics = self.metrics()
        await self.s.send("turn.metrics", **metrics)
        if not self.turn.greeting and not self.conversation_gone:
            self.s.gw.metrics.observe_turn(self.s.source, metrics)
            await self.s.gw.memory.finish_turn(
                self._event(text, text, interrupted=False), None, TurnMetrics.of(metrics)
            )

    async def _agent_turn(self) -> None:
        splitter = SentenceSplitter()
        filler = FillerDetector()
        inp = TurnInput(
            text=self.turn.text,
            mode=VOICE,
            conversation_id=self.s.conversation_id,
            turn_id=self.turn.turn_id,
            source=self.s.source,
            notes=self.turn.notes,
            publish=False,
            llm_timeout_s=self.s.voice.config.llm_timeout_s,
            answers=self.turn.answers,
            client_tools=self.s.client_tools,
            call=self.s.control,
        )
        self.t_llm_start = time.monotonic()
        try:
            await self._run_agent(inp, splitter, filler)
        except NotFound:  # the conversation (or agent) is gone before the turn started
            if not await self._conversation_gone():
                raise

    async def _conversation_gone(self) -> bool:
        """Was the call's conversation deleted (e.g. the caller erased) during the turn?"""
        try:
            await self.s.gw.memory.conversations.get(self.s.conversation_id or "")
        except NotFound:
            self.conversation_gone = True
            self.stop_reason = "error"
        return self.conversation_gone

    async def _run_agent(
        self, inp: TurnInput, splitter: SentenceSplitter, filler: FillerDetector
    ) -> None:
        current: str | None = None
        async with aclosing(self.s.gw.loop.run(self.s.agent_id, inp)) as events:
            async for ev in events:
                if isinstance(ev, TextDelta | ToolArgsDelta) and self.t_llm_first is None:
                    self.t_llm_first = time.monotonic()
                if isinstance(ev, TextDelta):
                    if current is not None and ev.message_id != current:
                        self._say(splitter.flush(), current)
                    current = ev.message_id
                    self.texts[ev.message_id] = self.texts.get(ev.message_id, "") + ev.text
                    await self.s.send("response.text.delta", item_id=self.item_id, text=ev.text)
                    for sentence in splitter.push(ev.text):
                        self._say(sentence, ev.message_id)
                        if self.speaker.first_audio_at is None:
                            # the first audio goes out before the turn goes on (its next
                            # chunks, text events, the step's write): on a busy event loop
                            # that work held the first frame back ~3 ms (bench/voice_latency)
                            await self.speaker.first_audio()
                elif isinstance(ev, ToolArgsDelta):
                    self.t_first_tool = self.t_first_tool or time.monotonic()
                    found = filler.feed(ev)
                    if found is not None:
                        self._say(splitter.flush(), current)
                        await self._filler(found.text, found.cached)
                elif isinstance(ev, ToolCallReady):
                    self._say(splitter.flush(), current)  # said before the tool runs
                    await self.s.send(
                        "response.tool_call",
                        item_id=self.item_id,
                        name=ev.name,
                        arguments=ev.arguments,
                    )
                elif isinstance(ev, ToolResult):
                    await self.s.send(
                        "response.tool_result", item_id=self.item_id, name=ev.name, ok=ev.ok
                    )
                elif isinstance(ev, ApprovalRequest):  # read the action back, then wait
                    question = await self.s.approvals.requested(ev)
                    if question:
                        self._say(splitter.flush(), current)
                        # part of the reply's text: shown, in response.text.done, and in
                        # the turn's transcript (not in the stored assistant message)
                        key = READBACK + ev.message_id
                        self.texts[key] = question
                        await self.s.send(
                            "response.text.delta", item_id=self.item_id, text=question
                        )
                        self.speaker.say(question, key)
                elif isinstance(ev, RunDone):
                    self.stop_reason = ev.stop_reason
                    if ev.stop_reason == "error" and await self._conversation_gone():
                        splitter = SentenceSplitter()  # say no more of a deleted conversation
                    elif ev.stop_reason in ("llm_api_error", "error"):
                        self.s.gw.metrics.provider_error("llm", self.s.agent.model)
                        await self.s.error("llm_error", ev.error or "the model failed")
                        splitter = SentenceSplitter()  # not the half sentence it broke off in
                        await self._apologize()
        self._say(splitter.flush(), current)

    def _say(self, text: str | None, message_id: str | None) -> None:
        if text:
            self.speaker.say(text, message_id)

    async def _filler(self, text: str, cached: bool) -> None:
        self.filler_at = time.monotonic()
        self.s.gw.metrics.filler_plays.labels("cached" if cached else "pre_exec_msg").inc()
        await self.s.send("response.filler", item_id=self.item_id, text=text)
        audio = self.s.voice.phrases.cached(text, self.s.output_rate) if cached else None
        if audio is None and cached:
            audio = await self.s.voice.phrases.get(text, self.s.output_rate)
        if audio is not None:
            self.speaker.play(text, audio, "filler", urgent=True)
        else:
            self.speaker.say(text, None, kind="filler")

    async def _apologize(self) -> None:
        """Queue the cached spoken apology (espeak fallback if the voice itself failed)."""
        try:
            audio = await self.s.voice.phrases.get(APOLOGY, self.s.output_rate)
        except Exception:
            log.exception("no apology audio available")
            return
        self.speaker.play(APOLOGY, audio, "apology")

    async def _tts_failed(self, exc: Exception) -> None:
        self.s.gw.metrics.provider_error("tts", self.s.voice.tts.name)
        await self.s.error("tts_error", str(exc))
        await self._apologize()

    async def cancelled(self, reason: str) -> None:
        """After the task was cancelled: tell the client and store what was heard."""
        played = self.played_ms
        await self.s.send(
            "response.cancelled", item_id=self.item_id, reason=reason, played_ms=played
        )
        heard = heard_text(self.speaker.segments, played)
        cut = {mid: heard.get(mid, "") for mid in self.texts}
        full = " ".join(t for t in self.texts.values() if t)
        said = " ".join(cut[m] for m in self.texts if cut[m])
        cut = {m: t for m, t in cut.items() if not m.startswith(READBACK)}  # not a message
        if self.turn.greeting:
            return
        try:
            await self.s.gw.memory.finish_turn(self._event(full, said, interrupted=True), cut)
        except Exception:
            log.exception("could not store the truncated reply")

    def _event(self, text: str, heard: str, *, interrupted: bool) -> TranscriptEvent:
        return TranscriptEvent(
            event_id=new_id("evt"),
            agent_id=self.s.agent_id,
            conversation_id=self.s.conversation_id,
            identity_id=self.s.identity_id,
            turn_id=self.turn.turn_id,
            source=self.s.source,
            user_text=self.turn.text,
            agent_text=text,
            agent_text_heard=heard,
            interrupted=interrupted,
            started_at=self.started_at,
            ended_at=utcnow(),
        )

    def metrics(self) -> dict[str, Any]:
        sp = self.speaker
        first = sp.first_audio_at

        def ms(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round((b - a) * 1000, 1)

        start = self.turn.speech_end_at or self.turn.received_at
        filler_first = next((seg.sent_at for seg in sp.segments if seg.kind == "filler"), None)
        after = [
            seg.sent_at
            for seg in sp.segments
            if seg.kind == "sentence"
            and seg.sent_at
            and filler_first
            and seg.sent_at > filler_first
        ]
        return {
            "turn_id": self.turn.turn_id,
            "endpointing_ms": round(self.turn.endpointing_ms, 1),
            "stt_ms": round(self.turn.stt_ms, 1),
            "llm_ttft_ms": ms(self.t_llm_start, self.t_llm_first),
            "tts_ttfb_ms": None if sp.tts_ttfb_ms is None else round(sp.tts_ttfb_ms, 1),
            "voice_to_voice_ms": ms(start, first),
            "filler_ms": ms(self.t_first_tool, filler_first) if filler_first else None,
            # a tool turn as the caller hears it: end of speech -> the filler's first audio,
            # and the filler's first audio -> the first audio of what follows it (the result)
            "speech_to_filler_ms": ms(start, filler_first),
            "filler_to_reply_ms": ms(filler_first, after[0]) if after else None,
            **self.turn.turn_taking,
        }
