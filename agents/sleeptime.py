"""The sleeptime agent: after every N user turns (and when a call ends) it reads the new
transcript and rewrites the primary agent's memory through the one agent loop.

`handle(event)` applies one transcript event exactly once. A turn that does not make a rewrite
due is added to the agent's sleeptime state in the transaction that records its event id. A
rewrite runs the loop with staged memory tools (nothing is written while the model works);
its block edits (compare-and-set on the versions the run read, with history rows), archival
passages, the state and the event id are then committed in ONE transaction. A crash before
that commit leaves nothing behind, so the redelivered event simply runs again; a block that a
user changed meanwhile makes the commit fail and the rewrite run again on the new version."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from sqlalchemy import select

from agents.context import Mode
from agents.events import RunDone
from agents.loop import AgentLoop, TurnInput
from agents.tools import SLEEPTIME_TOOLS
from agents.tools.staging import StagedMemory
from memory.ids import utcnow
from memory.models import BlockData, Conflict, NotFound, TranscriptEvent
from memory.orm import Agent, ProcessedEvent, SleeptimeState
from memory.raw import Row, Stmt
from memory.service import Memory
from memory.sleeptime_rows import decode_states, pending_reads, pending_writes

log = logging.getLogger(__name__)

SLEEPTIME_PROMPT = """\
You are the sleeptime memory agent of a voice assistant. You do not talk to the user. You
read a transcript of recent turns and keep the assistant's memory accurate:
1. Archive salient, self-contained facts or episodes with archival_memory_insert.
2. Rewrite the `human` block with memory_rethink (or small edits with memory_replace /
   memory_insert) so it holds durable facts about the user as short "Key: value" lines:
   name, where they live, preferences, people and things they mention. Keep what is still
   true, update what changed, drop what is stale. Stay under the block's character limit.
3. Call memory_finish_edits when memory is up to date."""

SLEEPTIME = Mode(
    "sleeptime",
    system=SLEEPTIME_PROMPT,
    tool_names=tuple(SLEEPTIME_TOOLS),
    history=False,
    persist=False,
)
Outcome = Literal["duplicate", "unknown_agent", "agent_deleted", "pending", "ran", "skipped"]


@dataclass(slots=True)
class Result:
    outcome: Outcome
    lag_ms: float | None = None
    stop_reason: str | None = None


def transcript_text(events: list[dict[str, Any]]) -> str:
    lines = []
    for e in events:
        if e.get("user"):
            lines.append(f"user: {e['user']}")
        if e.get("agent"):
            who = "assistant (cut off)" if e.get("cut") else "assistant"
            lines.append(f"{who}: {e['agent']}")
    return "\n".join(lines)


class _HasPending(Protocol):
    pending_events: list[Any]
    pending_turns: int


@dataclass(slots=True)
class _Pending:
    """A sleeptime_state row as `note_pending` reads and writes it (not an ORM object: no
    unit of work per row)."""

    agent_id: str
    identity_id: str
    pending_turns: int
    pending_events: list[Any]
    stored: bool  # the row exists (else it is inserted)
    changed: bool = False


def _pending_with(state: _HasPending, event: TranscriptEvent) -> list[dict[str, Any]]:
    """The agent's unrewritten turns plus this one, in the order the turns ended."""
    pending = [p for p in (state.pending_events or []) if p.get("id") != event.event_id]
    if event.user_text or event.agent_text_heard:
        pending.append(
            {
                "id": event.event_id,
                "user": event.user_text,
                "agent": event.agent_text_heard,
                "cut": event.interrupted,
                "at": event.ended_at.isoformat(),
            }
        )
    return sorted(pending, key=lambda p: (str(p.get("at", "")), str(p["id"])))


class SleeptimeAgent:
    def __init__(
        self,
        memory: Memory,
        loop: AgentLoop,
        every_turns: int = 5,
        model: str | None = None,
        *,
        test_pause_s: float = 0.0,
    ) -> None:
        self.memory = memory
        self.loop = loop
        self.every_turns = max(1, every_turns)
        self.model = model  # None: each agent's own model
        self.test_pause_s = test_pause_s  # tests: stall before the commit (crash tests)
        self.max_attempts = 4  # rewrites redone because a user edited a block meanwhile

    async def handle(self, event: TranscriptEvent) -> Result:
        """Apply one transcript event exactly once."""
        async with self.memory.db.write() as s:
            if await s.get(ProcessedEvent, event.event_id) is not None:
                return Result("duplicate")
            if await s.scalar(select(Agent.id).where(Agent.id == event.agent_id)) is None:
                s.add(ProcessedEvent(event_id=event.event_id, agent_id=event.agent_id))
                log.warning(
                    "sleeptime: skipping event %s for unknown agent %s",
                    event.event_id,
                    event.agent_id,
                )
                return Result("unknown_agent")
            key = (event.agent_id, event.identity_id or "")
            state = await s.get(SleeptimeState, key, with_for_update=True)
            if state is None:
                state = SleeptimeState(
                    agent_id=event.agent_id,
                    identity_id=event.identity_id or "",
                    pending_turns=0,
                    pending_events=[],
                    runs=0,
                )
                s.add(state)
            pending = _pending_with(state, event)
            turns = sum(1 for p in pending if p.get("user"))
            if not pending or not (turns >= self.every_turns or event.call_ended):
                state.pending_events, state.pending_turns = pending, turns
                s.add(ProcessedEvent(event_id=event.event_id, agent_id=event.agent_id))
                return Result("pending" if pending else "skipped")
        # the rewrite runs outside any transaction (seconds with a real model)
        for attempt in range(1, self.max_attempts + 1):
            try:
                stop, staged = await self._rewrite(event, pending)
                result = await self._commit(event, pending, staged, stop)
            except NotFound:  # the agent was deleted while we worked
                result = None
            except RuntimeError:
                # a run that failed because its agent went away mid-run (its run record's
                # write then fails on the foreign key) is a deleted agent, not a poison entry
                if await self.memory.agents.exists(event.agent_id):
                    raise
                result = None
            except _BlockMoved as moved:
                log.info(
                    "sleeptime: block %s of agent %s changed during the rewrite; redoing it on "
                    "the new version (attempt %d)",
                    moved.label,
                    event.agent_id,
                    attempt,
                )
                continue
            if result is None:
                await self._record(event)
                log.warning(
                    "sleeptime: agent %s was deleted while event %s was processed; skipped",
                    event.agent_id,
                    event.event_id,
                )
                return Result("agent_deleted")
            return result
        raise Conflict(f"memory of agent {event.agent_id} kept changing during the rewrite")

    async def note_pending(self, events: list[TranscriptEvent]) -> list[TranscriptEvent]:
        """What `handle` does for events that make no rewrite due, for many events in ONE
        write transaction (a few set-based statements, straight on the driver: memory/
        sleeptime_rows.py) instead of one each; returns the events left for `handle`, in
        order: one that makes a rewrite due and every later one of the same agent and caller.
        Events already applied are skipped, as `handle` would.

        The in-process transcript bus runs this on the gateway's event loop: with a `handle`
        transaction per turn the bus cost the voice bench's gateway ~4 ms of main-thread CPU
        per turn; one ORM transaction per drain ~1 ms at 100 calls; this, without the ORM,
        less again (docs/benchmarks.md#voice_concurrency)."""
        if not events:
            return []
        keys = sorted({(e.agent_id, e.identity_id or "") for e in events})
        reads = pending_reads(
            [e.event_id for e in events], sorted({agent for agent, _ in keys}), keys
        )
        sqlite = self.memory.db.is_sqlite

        def decide(rows: list[list[Row]]) -> tuple[list[Stmt], list[TranscriptEvent]]:
            states = {
                (r["agent_id"], r["identity_id"]): _Pending(
                    r["agent_id"],
                    r["identity_id"],
                    r["pending_turns"] or 0,
                    list(r["pending_events"] or []),
                    stored=True,
                )
                for r in decode_states(rows[2], sqlite=sqlite)
            }
            left, processed = self._plan(
                events, {r["event_id"] for r in rows[0]}, {r["id"] for r in rows[1]}, states
            )
            changed = [p for p in states.values() if p.changed]
            new, old = [p for p in changed if not p.stored], [p for p in changed if p.stored]
            return pending_writes(new, old, processed, utcnow()), left

        return await self.memory.db.exchange(reads, decide)

    def _plan(
        self,
        events: list[TranscriptEvent],
        done: set[str],
        known: set[str],
        states: dict[tuple[str, str], _Pending],
    ) -> tuple[list[TranscriptEvent], list[tuple[str, str]]]:
        """`note_pending`'s decisions: the events left for `handle`, and the (event id, agent
        id)s recorded as processed; `states` take the pending turns."""
        left: list[TranscriptEvent] = []
        deferred: set[tuple[str, str]] = set()
        processed: list[tuple[str, str]] = []
        for event in events:
            key = (event.agent_id, event.identity_id or "")
            if key in deferred:
                left.append(event)
                continue
            if event.event_id in done:
                continue  # handle() would say "duplicate"
            if event.agent_id not in known:
                log.warning(
                    "sleeptime: skipping event %s for unknown agent %s",
                    event.event_id,
                    event.agent_id,
                )
            else:
                state = states.get(key)
                if state is None:
                    state = states[key] = _Pending(key[0], key[1], 0, [], stored=False)
                if not self._pends(state, event):
                    deferred.add(key)  # a rewrite is due: handle() runs it, and the rest
                    left.append(event)
                    continue
                state.changed = True
            done.add(event.event_id)
            processed.append((event.event_id, event.agent_id))
        return left, processed

    def _pends(self, state: _HasPending, event: TranscriptEvent) -> bool:
        """Add the event to the state's pending turns if that makes no rewrite due (True)."""
        pending = _pending_with(state, event)
        turns = sum(1 for p in pending if p.get("user"))
        if pending and (turns >= self.every_turns or event.call_ended):
            return False
        state.pending_events, state.pending_turns = pending, turns
        return True

    async def _commit(
        self,
        event: TranscriptEvent,
        pending: list[dict[str, Any]],
        staged: StagedMemory,
        stop: str,
    ) -> Result | None:
        """Write the run's memory edits, its passages, the state and the event id at once.
        None: the agent is gone."""
        rows = []
        for text, tags in staged.passages:  # embeddings are computed before the transaction
            rows += await self.memory.archival.prepare(
                event.agent_id,
                [text],
                tags,
                source_event_id=event.event_id,
                identity_id=event.identity_id,  # a caller's memories are theirs alone
            )
        if self.test_pause_s:
            log.info("sleeptime: test pause before committing the rewrite of %s", event.event_id)
            await asyncio.sleep(self.test_pause_s)
        lag = (time.time() - event.ended_at.timestamp()) * 1000
        changed: list[BlockData] = []
        async with self.memory.db.write() as s:
            if await s.get(ProcessedEvent, event.event_id) is not None:
                return Result("duplicate")
            key = (event.agent_id, event.identity_id or "")
            state = await s.get(SleeptimeState, key, with_for_update=True)
            if state is None:
                return None  # deleted with its agent (or the caller was erased)
            for label, value in staged.blocks.items():
                if value == staged.original.get(label):
                    continue  # edited back to what it was
                block = await self.memory.blocks.write_in(
                    s, staged.ids[label], staged.base[label], value, actor="sleeptime"
                )
                if block is None:
                    raise _BlockMoved(label)
                changed.append(block)
            await self.memory.archival.add_prepared(s, event.agent_id, rows)
            done = {p["id"] for p in pending}
            state.pending_events = [p for p in (state.pending_events or []) if p["id"] not in done]
            state.pending_turns = sum(1 for p in state.pending_events if p.get("user"))
            state.runs = int(state.runs or 0) + 1
            state.last_run_at = utcnow()
            state.lag_ms_last = lag
            s.add(ProcessedEvent(event_id=event.event_id, agent_id=event.agent_id))
        for block in changed:
            await self.memory.blocks.notify(block)
        log.info(
            "sleeptime: agent %s memory rewritten (%s; %d passages) from %d turns (%s, "
            "lag %.0f ms)",
            event.agent_id,
            ", ".join(b.label for b in changed) or "no block changed",
            len(rows),
            len(pending),
            stop,
            lag,
        )
        return Result("ran", lag_ms=lag, stop_reason=stop)

    async def _record(self, event: TranscriptEvent) -> None:
        async with self.memory.db.write() as s:
            if await s.get(ProcessedEvent, event.event_id) is None:
                s.add(ProcessedEvent(event_id=event.event_id, agent_id=event.agent_id))

    async def _rewrite(
        self, event: TranscriptEvent, pending: list[dict[str, Any]]
    ) -> tuple[str, StagedMemory]:
        caller = event.identity_id
        if caller is not None:
            await self.memory.blocks.ensure_caller_copies(event.agent_id, caller)
        blocks = await self.memory.blocks.all(event.agent_id, caller)
        staged = StagedMemory(original={b.label: b.value for b in blocks})
        editable = [
            b.label
            for b in blocks
            if not b.read_only
            and (b.label == "human" or b.sleeptime_editable)
            and (caller is None or b.identity_id == caller)  # a caller's own blocks only
        ]
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        text = (
            f"New conversation turns ({now}). Update memory. Blocks you may edit: "
            f"{', '.join(editable) or 'none'}.\n\nTranscript:\n{transcript_text(pending)}"
        )
        inp = TurnInput(
            text=text,
            mode=SLEEPTIME,
            publish=False,
            source_event_id=event.event_id,
            max_steps=6,
            model=self.model,
            staged=staged,
            identity_id=caller,
            record=True,  # a sleeptime pass is a run (it stores no messages)
        )
        stop = "error"
        async with aclosing(self.loop.run(event.agent_id, inp)) as events:
            async for ev in events:
                if isinstance(ev, RunDone):
                    stop = ev.stop_reason
                    if ev.error:
                        raise RuntimeError(f"sleeptime run failed: {ev.error}")
        return stop, staged


class _BlockMoved(Exception):
    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label
