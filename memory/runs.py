"""Runs and steps: what the agent loop records per request and per model call.

The records are slotted dataclasses the loop fills as it goes; `record_stmts` turns them into
two statements (an upsert of the run, an insert of the step) that ride in the step's own
transaction with its messages (`MessageStore.append(also=...)`), so recording costs no
transaction of its own. Reads (the runs and steps routes) go through `RunStore`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import Field
from sqlalchemy import Select, select

from memory.db import Database
from memory.ids import utcnow
from memory.models import NotFound, _Model
from memory.orm import Run, Step
from memory.raw import Stmt

RunStatus = Literal["created", "running", "completed", "failed", "cancelled"]
ACTIVE: tuple[RunStatus, ...] = ("created", "running")


def status_of(stop_reason: str | None) -> RunStatus:
    """A finished run's status by its stop reason (None: still running)."""
    if stop_reason is None:
        return "running"
    if stop_reason == "cancelled":
        return "cancelled"
    return "failed" if stop_reason in ("error", "llm_api_error") else "completed"


@dataclass(slots=True)
class StepRecord:
    """One model call: tokens and timings in nanoseconds (Letta's step metrics)."""

    id: str
    model: str
    usage_before: tuple[int, int] = (0, 0)  # the run's (prompt, completion) tokens at its start
    start_ns: int = field(default_factory=time.time_ns)
    start_perf_ns: int = field(default_factory=time.perf_counter_ns)
    llm_request_ns: int | None = None
    ttft_ns: int | None = None
    tool_execution_ns: int | None = None
    saved: bool = False

    def llm_started(self) -> None:
        self.llm_request_ns = -time.perf_counter_ns()

    def llm_done(self, ttft_ms: float | None) -> None:
        self.llm_request_ns = time.perf_counter_ns() + (self.llm_request_ns or -self.start_perf_ns)
        self.ttft_ns = None if ttft_ms is None else int(ttft_ms * 1e6)


@dataclass(slots=True)
class RunRecord:
    id: str
    agent_id: str
    conversation_id: str | None
    identity_id: str | None
    source: str
    model: str
    created_at: datetime = field(default_factory=utcnow)
    start_perf_ns: int = field(default_factory=time.perf_counter_ns)
    step_count: int = 0
    ttft_ns: int | None = None
    step: StepRecord | None = None


@dataclass(slots=True)
class TurnMetrics:
    """A voice turn's latencies (the `turn.metrics` event), kept on its run."""

    endpointing_ms: float | None = None
    stt_ms: float | None = None
    llm_ttft_ms: float | None = None
    tts_ttfb_ms: float | None = None
    voice_to_voice_ms: float | None = None
    filler_ms: float | None = None

    @classmethod
    def of(cls, metrics: dict[str, Any]) -> TurnMetrics:
        return cls(**{k: metrics.get(k) for k in cls.__slots__})

    def as_dict(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in self.__slots__}


_RUN_COLS = (
    "id, agent_id, conversation_id, identity_id, source, background, status, stop_reason, "
    "error, model, step_count, prompt_tokens, completion_tokens, ttft_ns, total_duration_ns, "
    "metrics, request_config, metadata, created_at, completed_at"
)
# constants as literals: nothing to encode per step (the hot path)
_UPSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLS}) VALUES ({', '.join('?' * 15)}, '{{}}', ?, '{{}}', ?, ?) "
    "ON CONFLICT (id) DO UPDATE "
    "SET status = excluded.status, stop_reason = excluded.stop_reason, error = excluded.error, "
    "model = excluded.model, step_count = excluded.step_count, "
    "prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, "
    "ttft_ns = excluded.ttft_ns, total_duration_ns = excluded.total_duration_ns, "
    "completed_at = excluded.completed_at"
)
_STEP_COLS = (
    "id, run_id, agent_id, conversation_id, identity_id, model, status, stop_reason, error, "
    "prompt_tokens, completion_tokens, step_start_ns, step_ns, llm_request_ns, ttft_ns, "
    "tool_execution_ns, tags, created_at"
)
_INSERT_STEP = f"INSERT INTO steps ({_STEP_COLS}) VALUES ({', '.join('?' * 16)}, '[]', ?)"
_METRICS = "UPDATE runs SET metrics = ? WHERE id = ?"


def record_stmts(
    run: RunRecord,
    usage: tuple[int, int],
    stop_reason: str | None,
    error: str | None = None,
) -> list[Stmt]:
    """The run as it stands (upserted) and its current step if not stored yet. `usage` is the
    run's (prompt, completion) tokens so far; `stop_reason` None: the run goes on."""
    now, stmts = time.perf_counter_ns(), list[Stmt]()
    step = run.step
    if step is not None and not step.saved:
        step.saved = True
        status = {"running": "success", "completed": "success"}.get(
            status_of(stop_reason), status_of(stop_reason)
        )
        step_params: tuple[Any, ...] = (
            step.id, run.id, run.agent_id, run.conversation_id, run.identity_id, step.model,
            status, stop_reason, error, usage[0] - step.usage_before[0],
            usage[1] - step.usage_before[1],
            step.start_ns, now - step.start_perf_ns, step.llm_request_ns, step.ttft_ns,
            step.tool_execution_ns, utcnow(),
        )  # fmt: skip
        stmts.append(Stmt(_INSERT_STEP, step_params))
    done = stop_reason is not None
    params: tuple[Any, ...] = (
        run.id, run.agent_id, run.conversation_id, run.identity_id, run.source, False,
        status_of(stop_reason), stop_reason, error, run.model, run.step_count, usage[0],
        usage[1], run.ttft_ns, now - run.start_perf_ns if done else None, "{}",
        run.created_at, utcnow() if done else None,
    )  # fmt: skip
    stmts.insert(0, Stmt(_UPSERT_RUN, params))
    return stmts


def metrics_stmt(run_id: str, metrics: TurnMetrics) -> Stmt:
    return Stmt(_METRICS, (metrics.as_dict(), run_id))


class RunData(_Model):
    id: str
    agent_id: str
    conversation_id: str | None = None
    identity_id: str | None = None
    source: str = "text"
    background: bool = False
    status: str = "created"
    stop_reason: str | None = None
    error: str | None = None
    model: str | None = None
    step_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ns: int | None = None
    total_duration_ns: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    request_config: dict[str, Any] = Field(default_factory=dict)
    metadata_: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None
    completed_at: datetime | None = None


class StepData(_Model):
    id: str
    run_id: str
    agent_id: str
    conversation_id: str | None = None
    identity_id: str | None = None
    model: str | None = None
    status: str = "success"
    stop_reason: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    step_start_ns: int | None = None
    step_ns: int | None = None
    llm_request_ns: int | None = None
    ttft_ns: int | None = None
    tool_execution_ns: int | None = None
    feedback: str | None = None
    tags: list[str] = Field(default_factory=list)
    created_at: datetime | None = None


Order = Literal["asc", "desc"]


class RunStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        run: RunRecord,
        *,
        background: bool,
        request_config: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """A run stored before it starts (a background run: pollable at once)."""
        stmt = record_stmts(run, (0, 0), None)[0]
        params = list(stmt.params)
        params[5], params[6], params[15] = background, "created", request_config
        await self.db.batch([Stmt(stmt.sql, params)], write=True)
        if metadata:
            await self.merge_metadata(run.id, metadata)

    async def merge_metadata(self, run_id: str, values: dict[str, Any]) -> None:
        """Set keys of the run's metadata (the loop never writes it: no race with a step)."""
        async with self.db.write() as s:
            row = await s.scalar(select(Run).where(Run.id == run_id))
            if row is not None:
                row.metadata_ = {**(row.metadata_ or {}), **values}

    async def get(self, run_id: str) -> RunData:
        async with self.db.read() as s:
            row = await s.scalar(select(Run).where(Run.id == run_id))
            if row is None:
                raise NotFound("run", run_id)
            return RunData.model_validate(row)

    async def mark_failed(self, run_id: str, error: str) -> bool:
        """A run still `created`/`running` becomes `failed` (its gateway is gone); False if
        it had ended meanwhile."""
        async with self.db.write() as s:
            row = await s.scalar(select(Run).where(Run.id == run_id))
            if row is None or row.status not in ACTIVE:
                return False
            row.status, row.stop_reason, row.error = "failed", "error", error
            row.completed_at = utcnow()
            return True

    async def active_background(self) -> list[str]:
        """Ids of background runs still `created` or `running`."""
        async with self.db.read() as s:
            q = select(Run.id).where(Run.background.is_(True), Run.status.in_(ACTIVE))
            return list(await s.scalars(q))

    async def get_step(self, step_id: str) -> StepData:
        async with self.db.read() as s:
            row = await s.scalar(select(Step).where(Step.id == step_id))
            if row is None:
                raise NotFound("step", step_id)
            return StepData.model_validate(row)

    async def page(
        self, q: Select[Run], *, limit: int, after: str | None, before: str | None,
        order: Order,
    ) -> list[RunData]:  # fmt: skip
        async with self.db.read() as s:
            q = await _cursor(s, q, Run, after, before, order, "run")
            return [RunData.model_validate(r) for r in (await s.scalars(q.limit(limit)))]

    async def steps(
        self, q: Select[Step], *, limit: int, after: str | None, before: str | None,
        order: Order,
    ) -> list[StepData]:  # fmt: skip
        async with self.db.read() as s:
            q = await _cursor(s, q, Step, after, before, order, "step")
            return [StepData.model_validate(r) for r in (await s.scalars(q.limit(limit)))]

    async def feedback(self, step_id: str, feedback: str | None, tags: list[str] | None) -> None:
        async with self.db.write() as s:
            row = await s.scalar(select(Step).where(Step.id == step_id))
            if row is None:
                raise NotFound("step", step_id)
            row.feedback = feedback
            if tags is not None:
                row.tags = sorted(set(row.tags or []) | set(tags))


async def _cursor(
    s: Any, q: Any, table: Any, after: str | None, before: str | None, order: Order, kind: str
) -> Any:
    """`after`/`before` (ids) follow the sort order, as Letta's cursors do."""
    for cursor, is_after in ((after, True), (before, False)):
        if cursor is None:
            continue
        seq = await s.scalar(select(table.seq).where(table.id == cursor))
        if seq is None:
            raise NotFound(kind, cursor)
        later = is_after == (order == "asc")
        q = q.where(table.seq > seq if later else table.seq < seq)
    return q.order_by(table.seq.asc() if order == "asc" else table.seq.desc())
