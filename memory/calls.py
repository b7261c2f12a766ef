"""Call records: create, read, page (owner-scoped) and status changes.

A status change appends `{status, at}` to the record's history. Once a call has ended
(a terminal status) its status, end reason and end time stay: a vendor's late or repeated
callback (Twilio sends `completed` after our own hang-up) only adds to the history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, or_, select, update

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import NotFound, _Model
from memory.orm import CallRecord

KIND = "call"
Direction = Literal["inbound", "outbound"]
TERMINAL = frozenset({"completed", "busy", "no-answer", "failed", "canceled"})
# the end reason a terminal vendor status gives when nothing more precise was recorded
END_REASONS = {
    "no-answer": "no_answer",
    "busy": "busy",
    "failed": "failed",
    "canceled": "canceled",
    "completed": "completed",
}


class CallData(_Model):
    id: str
    agent_id: str
    user_id: str | None
    direction: str
    transport: str
    caller: str | None
    status: str
    history: list[dict[str, Any]]
    created_at: datetime
    answered_at: datetime | None
    ended_at: datetime | None
    end_reason: str | None
    conversation_id: str | None
    vendor_call_id: str | None
    options: dict[str, Any]
    metadata: dict[str, Any]
    recording_path: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


def _data(row: CallRecord) -> CallData:
    fields = {k: getattr(row, k) for k in CallData.model_fields if k != "metadata"}
    return CallData(**fields, metadata=dict(row.extra or {}))


def _stamp(status: str) -> dict[str, Any]:
    return {"status": status, "at": utcnow().isoformat()}


class CallStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        agent_id: str,
        *,
        user_id: str | None,
        direction: Direction,
        transport: str,
        status: str,
        caller: str | None = None,
        vendor_call_id: str | None = None,
        conversation_id: str | None = None,
        options: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> CallData:
        now = utcnow()
        row = CallRecord(
            id=new_id("call"),
            agent_id=agent_id,
            user_id=user_id,
            direction=direction,
            transport=transport,
            caller=caller,
            status=status,
            history=[_stamp(status)],
            created_at=now,
            answered_at=now if status == "in-progress" else None,
            vendor_call_id=vendor_call_id,
            conversation_id=conversation_id,
            options=options or {},
            extra=metadata or {},
        )
        async with self.db.write() as s:
            s.add(row)
        return _data(row)

    async def get(
        self, call_id: str, *, user_id: str | None = None, scoped: bool = False
    ) -> CallData:
        """The record; with `scoped`, only a call of `user_id`'s agents (another's: NotFound)."""
        q = select(CallRecord).where(CallRecord.id == call_id)
        if scoped:
            q = q.where(CallRecord.user_id == user_id)
        async with self.db.read() as s:
            row = await s.scalar(q)
        if row is None:
            raise NotFound(KIND, call_id)
        return _data(row)

    async def by_vendor_id(self, vendor_call_id: str) -> CallData | None:
        async with self.db.read() as s:
            row = await s.scalar(
                select(CallRecord)
                .where(CallRecord.vendor_call_id == vendor_call_id)
                .order_by(CallRecord.seq.desc())
                .limit(1)
            )
        return _data(row) if row is not None else None

    async def page(
        self,
        *,
        user_id: str | None = None,
        scoped: bool = False,
        agent_id: str | None = None,
        status: str | None = None,
        caller: str | None = None,
        after: str | None = None,
        limit: int = 50,
        ascending: bool = False,
    ) -> list[CallData]:
        q = select(CallRecord)
        if scoped:
            q = q.where(CallRecord.user_id == user_id)
        if agent_id is not None:
            q = q.where(CallRecord.agent_id == agent_id)
        if status is not None:
            q = q.where(CallRecord.status == status)
        if caller is not None:
            q = q.where(CallRecord.caller == caller)
        async with self.db.read() as s:
            if after is not None:
                seq = await s.scalar(select(CallRecord.seq).where(CallRecord.id == after))
                if seq is None:
                    raise NotFound(KIND, after)
                q = q.where(CallRecord.seq > seq if ascending else CallRecord.seq < seq)
            order = CallRecord.seq.asc() if ascending else CallRecord.seq.desc()
            rows = (await s.scalars(q.order_by(order).limit(limit))).all()
        return [_data(r) for r in rows]

    async def update(
        self,
        call_id: str,
        *,
        status: str | None = None,
        end_reason: str | None = None,
        conversation_id: str | None = None,
        vendor_call_id: str | None = None,
        caller: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> CallData:
        """Record what is newly known of a call (None: unchanged); see the module docstring
        for how an ended call keeps its outcome."""
        async with self.db.write() as s:
            row = await s.scalar(
                select(CallRecord).where(CallRecord.id == call_id).with_for_update()
            )
            if row is None:
                raise NotFound(KIND, call_id)
            ended = row.status in TERMINAL
            if status is not None:
                row.history = [*row.history, _stamp(status)]
                if ended and row.end_reason is None and status in TERMINAL:
                    row.end_reason = end_reason or END_REASONS.get(status, status)
                if not ended:
                    row.status = status
                    if status == "in-progress" and row.answered_at is None:
                        row.answered_at = utcnow()
                    if status in TERMINAL:
                        row.ended_at = utcnow()
                        row.end_reason = end_reason or END_REASONS.get(status, status)
            elif end_reason is not None and row.end_reason is None:
                row.end_reason = end_reason
            if conversation_id is not None:
                row.conversation_id = conversation_id
            if vendor_call_id is not None:
                row.vendor_call_id = vendor_call_id
            if caller is not None:
                row.caller = caller
            if metadata:
                row.extra = {**(row.extra or {}), **metadata}
            return _data(row)

    async def forget_caller(self, caller: str, agent_ids: list[str]) -> int:
        """Erasing a caller: their key (a phone number) leaves the records of these agents,
        which keep only what the call was. The number of records changed."""
        if not agent_ids:
            return 0
        async with self.db.write() as s:
            result = await s.execute(
                update(CallRecord)
                .where(CallRecord.caller == caller, CallRecord.agent_id.in_(agent_ids))
                .values(caller=None)
            )
        return int(getattr(result, "rowcount", 0) or 0)

    async def set_recording(self, call_id: str, path: str | None) -> None:
        """The call's recording file (None: it is gone)."""
        async with self.db.write() as s:
            await s.execute(
                update(CallRecord).where(CallRecord.id == call_id).values(recording_path=path)
            )

    async def recordings(
        self,
        *,
        before: datetime | None = None,
        agent_ids: list[str] | None = None,
        caller: str | None = None,
        conversation_ids: list[str] | None = None,
    ) -> list[tuple[str, str]]:
        """(call id, recording path) of the calls with a recording: started before `before`,
        or of `agent_ids` and the caller (by key or by conversation)."""
        q = select(CallRecord.id, CallRecord.recording_path).where(
            CallRecord.recording_path.is_not(None)
        )
        if before is not None:
            q = q.where(CallRecord.created_at < before)
        if agent_ids is not None:
            whose: list[ColumnElement[bool]] = [
                CallRecord.conversation_id.in_(conversation_ids or [])
            ]
            if caller is not None:
                whose.append(CallRecord.caller == caller)
            q = q.where(CallRecord.agent_id.in_(agent_ids), or_(*whose))
        async with self.db.read() as s:
            rows = (await s.execute(q)).all()
        return [(str(r[0]), str(r[1])) for r in rows]
