"""THE agent loop. Text, voice, chat completions and sleeptime all run `AgentLoop.run`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from dataclasses import dataclass, field
from typing import Any

from agents.approvals import NotWaiting, pending_in
from agents.compiled import ContextCompiler
from agents.context import (
    CONSULT,
    TEXT,
    Mode,
    PromptCache,
    memory_metadata,
    order_context,
    to_openai,
)
from agents.events import (
    AgentEvent,
    ApprovalRequest,
    MessageSaved,
    ReasoningDelta,
    RunDone,
    StopReason,
    TextDelta,
    ToolArgsDelta,
    ToolCallReady,
    ToolResult,
)
from agents.llm import LLMError, LLMProvider, LLMRegistry, LLMRequest, Usage
from agents.locks import LocalLocks, TurnLocks
from agents.summarizer import Summarizer
from agents.tool_steps import (
    REQUIRED_NOTE,
    answer_waiting,
    ends_run,
    offered,
    plan,
    rules_of,
    tool_message,
    with_client_tools,
)
from agents.tools import REGISTRY, ToolContext
from agents.tools.call_tools import with_call_tools
from agents.tools.custom import custom_tool
from agents.tools.executor import Call, execute
from agents.tools.mcp_tools import McpTools
from agents.tools.registry import Tool, ToolRegistry
from agents.tools.sandbox import Sandbox
from agents.turn_input import LoopConfig, TurnInput
from memory.ids import default_conversation_id, new_id, utcnow
from memory.models import AgentData, MessageData, ToolCallData, TranscriptEvent
from memory.raw import Stmt
from memory.runs import RunRecord, StepRecord, record_stmts
from memory.service import Memory

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Run:
    agent: AgentData
    inp: TurnInput
    turn_id: str
    conversation_id: str
    identity_id: str | None = None
    messages_version: int | None = None
    started_at: object = field(default_factory=utcnow)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    texts: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    current: MessageData | None = None  # the assistant message being streamed, not yet stored
    unsaved: list[MessageData] = field(default_factory=list)  # input messages, stored with step 1
    published: bool = False
    ttft_ms: float | None = None
    record: RunRecord | None = None  # the run and its current step, stored with each step
    rules_text: str | None = None  # the agent's tool rules, told to the model

    def new_message(self, role: str, **kw: object) -> MessageData:
        return MessageData(
            id=new_id("message"),
            agent_id=self.agent.id,
            role=role,
            conversation_id=self.conversation_id,
            identity_id=self.identity_id,
            turn_id=self.turn_id,
            **kw,
        )


class AgentLoop:
    def __init__(
        self,
        memory: Memory,
        llms: LLMRegistry,
        *,
        config: LoopConfig | None = None,
        tools: ToolRegistry = REGISTRY,
        locks: TurnLocks | None = None,
    ) -> None:
        self.memory = memory
        self.llms = llms
        self.config = config or LoopConfig()
        self.tools = tools
        self.locks: TurnLocks = locks or LocalLocks()
        self.prompts = PromptCache()
        self.contexts = ContextCompiler()
        self.summarizer = Summarizer(memory)
        self.sandbox = Sandbox(self.config.sandbox)
        self.mcp: McpTools | None = None  # MCP servers' tools (set by the gateway)

    def tools_for(self, agent: AgentData, mode: Mode, custom: Sequence[Tool] = ()) -> list[Tool]:
        names = list(mode.tool_names) if mode.tool_names is not None else agent.tool_names
        return self.tools.select(names, voice=mode.voice_tools, extra=custom)

    async def load_tools(self, agent: AgentData, mode: Mode) -> list[Tool]:
        """The run's tools: built-ins, the agent's custom tools (run in the sandbox) and MCP
        servers' tools."""
        names = list(mode.tool_names) if mode.tool_names is not None else agent.tool_names
        unknown = [n for n in names if self.tools.get(n) is None]
        rows = await self.memory.tools.by_names(agent.user_id, unknown) if unknown else []
        extra = [custom_tool(r, self.sandbox) for r in rows if r.mcp_server_id is None]
        served = [r for r in rows if r.mcp_server_id is not None]
        if served and self.mcp is not None:
            extra += await self.mcp.tools(served)
        return self.tools_for(agent, mode, extra)

    async def run(self, agent_id: str, inp: TurnInput) -> AsyncGenerator[AgentEvent, None]:
        """Run one turn of a conversation (`inp.conversation_id`, default: the agent's default
        conversation). Turns of one conversation take turns (its lock); turns of different
        conversations of one agent run in parallel. Consume with `contextlib.aclosing` so
        cancellation persists promptly."""
        conv_id = inp.conversation_id or default_conversation_id(agent_id)
        # runs that store no messages (sleeptime) need not wait for a live turn
        lock = self.locks.hold(conv_id) if inp.mode.persist else nullcontext()
        async with lock:
            run = await self._start(agent_id, conv_id, inp)
            try:
                async for event in self._steps(run):
                    yield event
            except (asyncio.CancelledError, GeneratorExit):
                await asyncio.shield(self._save_partial(run, "cancelled"))
                raise
            except LLMError as exc:
                log.warning("agent %s: %s", agent_id, exc)
                yield await self._stop(run, "llm_api_error", str(exc))
            except Exception as exc:
                log.exception("agent %s: turn failed", agent_id)
                yield await self._stop(run, "error", f"{type(exc).__name__}: {exc}")

    async def consult(self, agent_id: str, text: str) -> RunDone | None:
        """`AgentRunner.consult`: run `agent_id` on `text` in consult mode; how the run ended."""
        done: RunDone | None = None
        inp = TurnInput(text=text, mode=CONSULT, publish=False)
        async with aclosing(self.run(agent_id, inp)) as events:
            async for event in events:
                if isinstance(event, RunDone):
                    done = event
        return done

    def turn_lock(self, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """`AgentRunner.turn_lock`: the conversation's turn lock."""
        return self.locks.hold(conversation_id)

    async def _start(self, agent_id: str, conv_id: str, inp: TurnInput) -> _Run:
        turn_id = inp.turn_id or new_id("turn")
        if not inp.mode.persist and inp.conversation_id is None:
            agent = await self.memory.agents.get(agent_id, identity_id=inp.identity_id)
            run = _Run(agent, inp, turn_id, conv_id, inp.identity_id)
        else:
            agent, conv = await self.memory.turn_state(agent_id, conv_id)
            run = _Run(agent, inp, turn_id, conv.id, conv.identity_id, conv.messages_version)
        if inp.record if inp.record is not None else inp.mode.persist:
            stored = inp.mode.persist or inp.conversation_id is not None
            run.record = RunRecord(
                turn_id,
                agent_id,
                run.conversation_id if stored else None,
                run.identity_id,
                inp.source if inp.mode.name != "sleeptime" else "sleeptime",
                inp.model or agent.model,
            )
        return run

    async def _steps(self, run: _Run) -> AsyncIterator[AgentEvent]:
        """Steps until the model stops calling tools. The input messages are stored with the
        first step's messages, and each step's assistant message with its tool results, in one
        transaction per step (as Letta does)."""
        inp, agent = run.inp, run.agent
        provider, model = self.llms.resolve(inp.model or agent.model)
        tools = with_call_tools(await self.load_tools(agent, inp.mode), agent, inp.call)
        tools = with_client_tools(tools, inp.client_tools)
        by_name = {t.name: t for t in tools}
        solver = rules_of(agent)
        run.rules_text = solver.prompt_block()
        history: list[MessageData] = []
        if inp.mode.history:
            history = order_context(
                await self.memory.messages.in_context(run.conversation_id, run.messages_version)
            )
        waiting = pending_in(history)
        if inp.answers is not None and waiting is None:
            raise NotWaiting("no tool call of this conversation is waiting for an answer")
        ctx = ToolContext(
            memory=self.memory,
            agent=agent,
            actor="sleeptime" if inp.mode.name == "sleeptime" else "agent",
            user_text=inp.text,
            conversation_id=run.conversation_id,
            identity_id=run.identity_id,
            turn_id=run.turn_id,
            source_event_id=inp.source_event_id,
            staged=inp.staged,
            runner=self if inp.mode is not CONSULT else None,  # an asked agent asks no further
            call=inp.call,
        )
        run.unsaved = []
        if waiting is not None:  # answer the waiting calls first (unanswered ones: refused)
            timeout, new = self.config.tool_timeout_s, run.new_message
            run.unsaved, results, ends = await answer_waiting(
                waiting, inp.answers, solver, by_name, ctx, timeout, new, inp.answers_only
            )
            for answered in results:
                yield answered
            if inp.answers is not None:
                ends = ends or inp.answers_only
                context = history + run.unsaved
                for m in await self._save(run, [], "end_turn" if ends else None):
                    yield m
                if ends:
                    yield self._done(run, "end_turn")
                    return
        if inp.answers is None:
            run.unsaved += [run.new_message("user", content=n, kind="note") for n in inp.notes]
            run.unsaved.append(run.new_message("user", content=inp.text, otid=inp.otid))
            context = history + run.unsaved
        max_steps = inp.max_steps or self.config.max_steps
        for step in range(max_steps):
            run.steps = step + 1
            context, messages = await self._prompt(run, context, provider, model)
            req = LLMRequest(
                model=model,
                messages=messages,
                tools=[t.schema(voice=inp.mode.voice_tools) for t in offered(tools, solver)],
                timeout_s=inp.llm_timeout_s,
            )
            assistant = run.current = run.new_message("assistant", step_id=new_id("step"))
            rec = run.record
            if rec is not None:
                usage = (run.usage.prompt_tokens, run.usage.completion_tokens)
                rec.step = StepRecord(str(assistant.step_id), rec.model, usage_before=usage)
                rec.step_count = step + 1
                rec.step.llm_started()
            calls: dict[int, Call] = {}
            async for ev in self._stream(run, provider, req, calls):
                yield ev
            if rec is not None and rec.step is not None:
                rec.step.llm_done(provider.last_ttft_ms)
            ordered = [calls[i] for i in sorted(calls)]
            for call in ordered:
                call.finalize()
            assistant.tool_calls = [
                ToolCallData(id=c.id, name=c.name, arguments=c.arguments) for c in ordered
            ]
            if not ordered:
                missing = solver.uncalled_required(set(by_name))
                if missing and step < max_steps - 1:  # Letta's: the run may not end yet
                    note = REQUIRED_NOTE.format(names=", ".join(missing))
                    kept = [assistant] if assistant.content else []
                    kept.append(run.new_message("user", content=note, kind="note"))
                    for m in await self._save(run, kept):
                        yield m
                    context += kept
                    continue
                for m in await self._save(
                    run, [assistant] if assistant.content else [], "end_turn"
                ):
                    yield m
                yield self._done(run, "end_turn")
                return
            steps = plan(ordered, solver, by_name)
            if steps.pending:
                assistant.kind = steps.mark_waiting(assistant.tool_calls)
            for call in ordered:
                if call.id in steps.violations or call.id in steps.waiting:
                    continue
                yield ToolCallReady(
                    assistant.id, call.id, call.name, call.arguments, call.pre_exec_msg
                )
            t_tools = time.perf_counter_ns()
            ran = [] if steps.pending else steps.run_now
            outcomes = await self._execute(ran, by_name, ctx)
            done_results = dict(zip([c.id for c in ran], outcomes, strict=True))
            if rec is not None and rec.step is not None:
                rec.step.tool_execution_ns = time.perf_counter_ns() - t_tools
            tool_msgs, ends = [], False
            for call in ordered:
                if call.id in steps.violations:
                    ok, result = False, steps.violations[call.id]
                elif call.id in done_results:
                    ok, result = done_results[call.id]
                    solver.last_output = result
                else:
                    continue  # waits with the approval request
                ends = ends or (ok and ends_run(by_name.get(call.name), solver))
                step_id = assistant.step_id
                msg = tool_message(run.new_message, call.id, call.name, ok, result, step_id)
                tool_msgs.append(msg)
                yield ToolResult(msg.id, call.id, call.name, ok, result)
            if steps.pending:
                for m in await self._save(run, [assistant, *tool_msgs], "requires_approval"):
                    yield m
                yield ApprovalRequest(assistant.id, steps.pending)
                yield self._done(run, "requires_approval")
                return
            stop: StopReason | None = "end_turn" if ends else None
            if stop is None and step == max_steps - 1:
                stop = "max_steps"
            for m in await self._save(run, [assistant, *tool_msgs], stop):
                yield m
            context += [assistant, *tool_msgs]
            if ends:
                yield self._done(run, "end_turn")
                return
        yield self._done(run, "max_steps")

    async def _prompt(
        self,
        run: _Run,
        context: list[MessageData],
        provider: LLMProvider,
        model: str,
    ) -> tuple[list[MessageData], list[dict[str, Any]]]:
        """The step's context (summarized when over the token budget) and its request
        messages; the history's conversion is extended from the conversation's previous step."""
        agent, mode = run.agent, run.inp.mode
        text = self.prompts.get(agent, mode, run.identity_id)
        if mode is TEXT:
            text = f"{text}\n\n{memory_metadata(agent, run.conversation_id)}"
        if run.rules_text:
            text = f"{text}\n\n<tool_usage_rules>\n{run.rules_text}\n</tool_usage_rules>"
        system: dict[str, Any] = {"role": "system", "content": text}
        if not mode.history:
            return context, [system, *to_openai(context)]
        budget = agent.context_window or self.config.context_token_budget
        compiled = self.contexts.compile(run.conversation_id, context)
        fitted = await self.summarizer.fit(
            agent,
            run.conversation_id,
            text,
            context,
            budget,
            provider,
            model,
            tokens=compiled.tokens,
            identity_id=run.identity_id,
        )
        if fitted is not context:
            compiled = self.contexts.compile(run.conversation_id, fitted)
        return fitted, [system, *compiled.openai]

    async def _stream(
        self, run: _Run, provider: LLMProvider, req: LLMRequest, calls: dict[int, Call]
    ) -> AsyncIterator[AgentEvent]:
        """One LLM call: text and reasoning into `run.current`, tool-call deltas by index."""
        assistant = run.current
        assert assistant is not None
        async for chunk in provider.stream(req):
            if run.ttft_ms is None:
                run.ttft_ms = provider.last_ttft_ms
            if chunk.usage:
                run.usage.add(chunk.usage)
            if chunk.reasoning:
                assistant.reasoning = (assistant.reasoning or "") + chunk.reasoning
                yield ReasoningDelta(assistant.id, chunk.reasoning)
            if chunk.text:
                assistant.content += chunk.text
                yield TextDelta(assistant.id, chunk.text)
            for d in chunk.tool_calls:
                call = calls.get(d.index)
                if call is None:
                    call = calls[d.index] = Call(d.index, d.id or new_id("call"), d.name or "")
                call.name = call.name or d.name or ""
                call.raw += d.arguments
                yield ToolArgsDelta(assistant.id, d.index, call.id, call.name, call.raw)

    async def _execute(
        self, calls: list[Call], by_name: dict[str, Tool], ctx: ToolContext
    ) -> list[tuple[bool, str]]:
        timeout = self.config.tool_timeout_s
        if len(calls) > 1 and all(
            by_name.get(c.name) and by_name[c.name].voice_safe for c in calls
        ):
            return list(
                await asyncio.gather(
                    *(execute(c, by_name.get(c.name), ctx, timeout) for c in calls)
                )
            )
        return [await execute(c, by_name.get(c.name), ctx, timeout) for c in calls]

    async def _save(
        self,
        run: _Run,
        messages: list[MessageData],
        stop: StopReason | None = None,
        error: str | None = None,
    ) -> list[MessageSaved]:
        """Persist a step's messages (with the turn's input messages if not stored yet); the
        step's and run's records and, with `stop` (the run ends), the turn's transcript event
        go in the same transaction."""
        messages = [*run.unsaved, *messages]
        run.unsaved = []
        run.current = None
        run.texts += [m.content for m in messages if m.role == "assistant" and m.content]
        event = self._transcript(run) if stop is not None and not run.published else None
        records = self._records(run, stop, error)
        if not run.inp.mode.persist:
            if records:
                await self.memory.db.batch(records, write=True)
            return [MessageSaved(m) for m in messages]
        if not messages and event is None and not records:
            return []
        also = [*records, *([self.memory.outbox.insert(event)] if event is not None else [])]
        await self.memory.messages.append(messages, also=also)
        if event is not None:
            run.published = True
            self.memory.outbox.added()
        run.message_ids += [m.id for m in messages]
        return [MessageSaved(m) for m in messages]

    def _records(self, run: _Run, stop: StopReason | None, error: str | None) -> list[Stmt]:
        rec = run.record
        if rec is None:
            return []
        if run.ttft_ms is not None and rec.ttft_ns is None:
            rec.ttft_ns = int(run.ttft_ms * 1e6)
        usage = (run.usage.prompt_tokens, run.usage.completion_tokens)
        return record_stmts(rec, usage, stop, error)

    def _transcript(self, run: _Run, interrupted: bool = False) -> TranscriptEvent | None:
        if not run.inp.publish or not run.inp.mode.persist:
            return None
        text = " ".join(run.texts)
        return TranscriptEvent(
            event_id=new_id("evt"),
            agent_id=run.agent.id,
            conversation_id=run.conversation_id,
            identity_id=run.identity_id,
            turn_id=run.turn_id,
            source=run.inp.source,
            user_text=run.inp.text,
            agent_text=text,
            agent_text_heard=text,
            interrupted=interrupted,
            started_at=run.started_at,
            ended_at=utcnow(),
        )

    async def _save_partial(self, run: _Run, stop: StopReason, error: str | None = None) -> None:
        current, run.current = run.current, None
        keep = []
        if current is not None and current.content:
            current.tool_calls, current.truncated = [], stop == "cancelled"
            keep.append(current)
        try:
            await self._save(run, keep, stop, error)
        except Exception:
            log.exception("agent %s: could not persist the partial reply", run.agent.id)

    async def _stop(self, run: _Run, reason: StopReason, error: str) -> RunDone:
        await self._save_partial(run, reason, error)
        return self._done(run, reason, error)

    def _done(self, run: _Run, reason: StopReason, error: str | None = None) -> RunDone:
        return RunDone(
            turn_id=run.turn_id,
            stop_reason=reason,
            usage=run.usage,
            steps=run.steps,
            agent_text=" ".join(run.texts),
            error=error,
            message_ids=list(run.message_ids),
            llm_ttft_ms=run.ttft_ms,
            model=run.inp.model or run.agent.model,
        )
