"""Runs of REST turns, per conversation: the registry that `POST /v1/conversations/{id}/cancel`
and `/v1/agents/{id}/messages/cancel` cancel and `POST /v1/conversations/{id}/stream` and
`/v1/runs/{id}/stream` resume. (The runs' records are the loop's, in the database.)

A run is one agent turn driven by its own task; the request that started it follows its
events (a blocking reply or SSE), and so may a resuming client. The run lives as long as the
request that started it: when that request goes away (client disconnect) the turn is
cancelled, as before, and the loop stores what it produced. Cancel ends the task the same
way; followers then see a `cancelled` stop reason. The last finished run of a conversation
stays replayable (bounded). A background run (`/messages/async`) has no request: its task
belongs to the registry, which cancels what is left when the gateway closes. Registry of this
process only: with several gateways, a cancel reaches the runs of the gateway that receives
it."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from agents.events import AgentEvent, RunDone
from agents.llm import Usage
from agents.loop import AgentLoop, TurnInput
from memory.ids import default_conversation_id, new_id
from memory.runs import RunRecord

CANCEL_WAIT_S = 10.0


@dataclass(eq=False)
class ActiveRun:
    run_id: str
    agent_id: str
    conversation_id: str
    tokens: bool  # the SSE form the run was started with (resume replays it the same way)
    events: list[AgentEvent] = field(default_factory=list)
    done: bool = False
    background: bool = False  # started by /messages/async: replayable after it ended
    task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, event: AgentEvent) -> None:
        self.events.append(event)
        self._wake.set()

    def finish(self) -> None:
        self.done = True
        self._wake.set()

    async def follow(self, start: int = 0) -> AsyncGenerator[AgentEvent, None]:
        """The run's events from index `start`, as they come, until it ends."""
        i = start
        while True:
            while i < len(self.events):
                yield self.events[i]
                i += 1
            if self.done:
                return
            self._wake.clear()
            if i == len(self.events) and not self.done:
                await self._wake.wait()


class ConversationRuns:
    def __init__(self, keep_last: int = 1024) -> None:
        self.active: dict[str, dict[str, ActiveRun]] = {}
        self.last: OrderedDict[str, ActiveRun] = OrderedDict()
        self.by_id: OrderedDict[str, ActiveRun] = OrderedDict()  # running and recent runs
        self.keep_last = keep_last
        self.background: set[asyncio.Task[None]] = set()

    def _register(self, loop: AgentLoop, agent_id: str, inp: TurnInput, tokens: bool) -> ActiveRun:
        conv_id = inp.conversation_id or default_conversation_id(agent_id)
        inp.turn_id = inp.turn_id or new_id("run")
        run = ActiveRun(inp.turn_id, agent_id, conv_id, tokens)
        self.active.setdefault(conv_id, {})[run.run_id] = run
        self.by_id[run.run_id] = run
        while len(self.by_id) > self.keep_last and next(iter(self.by_id.values())).done:
            self.by_id.popitem(last=False)
        run.task = asyncio.create_task(self._drive(loop, inp, run))
        return run

    async def start_background(
        self,
        loop: AgentLoop,
        agent_id: str,
        inp: TurnInput,
        request_config: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> ActiveRun:
        """Store the run (status `created`, pollable at once) and run it in a task of its
        own: it goes on when the client that started it goes away."""
        conv_id = inp.conversation_id or default_conversation_id(agent_id)
        inp.turn_id = inp.turn_id or new_id("run")
        agent, conv = await loop.memory.turn_state(agent_id, conv_id)
        model = inp.model or agent.model
        record = RunRecord(inp.turn_id, agent_id, conv_id, conv.identity_id, "text", model)
        await loop.memory.runs.create(
            record, background=True, request_config=request_config, metadata=metadata
        )
        run = self._register(loop, agent_id, inp, tokens=True)  # re-attached: token by token
        run.background = True
        assert run.task is not None
        self.background.add(run.task)
        run.task.add_done_callback(self.background.discard)
        return run

    async def run(
        self, loop: AgentLoop, agent_id: str, inp: TurnInput, *, tokens: bool = False
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run the turn in its own task and yield its events (consume with `aclosing`)."""
        run = self._register(loop, agent_id, inp, tokens)
        assert run.task is not None
        try:
            async for event in run.follow():
                yield event
        finally:
            if not run.task.done():
                run.task.cancel()
            await asyncio.wait({run.task})

    async def _drive(self, loop: AgentLoop, inp: TurnInput, run: ActiveRun) -> None:
        try:
            async with contextlib.aclosing(loop.run(run.agent_id, inp)) as events:
                async for event in events:
                    run.push(event)
        except asyncio.CancelledError:
            run.push(RunDone(run.run_id, "cancelled", Usage(), 0, ""))
            raise
        finally:
            run.finish()
            runs = self.active.get(run.conversation_id, {})
            runs.pop(run.run_id, None)
            if not runs:
                self.active.pop(run.conversation_id, None)
            self.last[run.conversation_id] = run
            self.last.move_to_end(run.conversation_id)
            while len(self.last) > self.keep_last:
                self.last.popitem(last=False)

    def latest(self, conversation_id: str) -> ActiveRun | None:
        """The newest running run of the conversation, else its last finished one."""
        running = list(self.active.get(conversation_id, {}).values())
        return running[-1] if running else self.last.get(conversation_id)

    async def cancel(self, conversation_id: str) -> list[str]:
        """Cancel the conversation's running turns and wait until each stored what it had."""
        runs = list(self.active.get(conversation_id, {}).values())
        tasks = [r.task for r in runs if r.task is not None and not r.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
        return [r.run_id for r in runs]

    async def cancel_agent(self, agent_id: str, run_ids: list[str] | None = None) -> list[str]:
        """Cancel the agent's running turns (those of `run_ids` only, if given)."""
        convs = {
            r.conversation_id
            for runs in self.active.values()
            for r in runs.values()
            if r.agent_id == agent_id and (run_ids is None or r.run_id in run_ids)
        }
        out: list[str] = []
        for conv in convs:
            runs = self.active.get(conv, {})
            chosen = [r for r in runs.values() if run_ids is None or r.run_id in run_ids]
            tasks = [r.task for r in chosen if r.task is not None and not r.task.done()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
            out += [r.run_id for r in chosen]
        return out

    def find(self, run_id: str) -> ActiveRun | None:
        return self.by_id.get(run_id)

    def forget(self, conversation_id: str) -> None:
        self.last.pop(conversation_id, None)

    async def aclose(self) -> None:
        """Cancel the background runs still going (each stores what it produced)."""
        tasks = list(self.background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)
