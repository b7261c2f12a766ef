"""What happened during a call, read back for its report: the messages and the runs of the
call's conversation stored between the call's start and end.

A caller's conversation can span several calls (their newest open one is reused), hence the
time window; the conversation is one caller's on one agent, so another caller's turns on the
same agent are never in it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from memory.db import Database
from memory.models import MessageData
from memory.orm import Message, Run
from memory.runs import RunData

MAX_MESSAGES = 2000  # a report's transcript stops there (hours of talk)


class CallHistory:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def messages(
        self, conversation_id: str, since: datetime, until: datetime | None
    ) -> list[MessageData]:
        """The conversation's messages stored in [since, until], oldest first."""
        q = select(Message).where(
            Message.conversation_id == conversation_id, Message.created_at >= since
        )
        if until is not None:
            q = q.where(Message.created_at <= until)
        async with self.db.read() as s:
            rows = await s.scalars(q.order_by(Message.seq.asc()).limit(MAX_MESSAGES))
            return [MessageData.model_validate(r) for r in rows]

    async def runs(
        self, conversation_id: str, since: datetime, until: datetime | None
    ) -> list[RunData]:
        """The conversation's runs (turns) started in [since, until], oldest first."""
        q = select(Run).where(Run.conversation_id == conversation_id, Run.created_at >= since)
        if until is not None:
            q = q.where(Run.created_at <= until)
        async with self.db.read() as s:
            rows = await s.scalars(q.order_by(Run.seq.asc()).limit(MAX_MESSAGES))
            return [RunData.model_validate(r) for r in rows]
