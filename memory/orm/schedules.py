"""Scheduled messages (Letta's `agents.schedule`): messages sent to an agent at a time (one-time,
deleted once fired) or on a cron expression (recurring). `next_run_at` is when it is due next;
`version` goes up with each firing, so a gateway claims a due firing with a conditional UPDATE
(or DELETE) that exactly one process wins (memory/schedules.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from memory.ids import utcnow
from memory.orm.base import Base, UTCDateTime


class ScheduledMessage(Base):
    __tablename__ = "scheduled_messages"
    __table_args__ = (Index("ix_scheduled_messages_agent_seq", "agent_id", "seq"),)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # "one-time" | "recurring"
    scheduled_at: Mapped[float | None] = mapped_column(Float(precision=53))  # Unix ms (one-time)
    cron_expression: Mapped[str | None] = mapped_column(String(200))  # (recurring)
    # the request to send: messages, callback_url, include_return_message_types, max_steps
    message: Mapped[dict[str, Any]] = mapped_column(JSON)
    next_run_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
