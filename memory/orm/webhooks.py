"""Webhook deliveries: one row per event to POST (memory/webhooks.py). `body` is the exact JSON
sent on every attempt (its id stays the same across retries); `next_at` is when the next
attempt is due, or, while one is under way, when its lease runs out."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from memory.ids import utcnow
from memory.orm.base import Base, UTCDateTime


class WebhookDelivery(Base):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("call_id", "event_type", name="uq_webhook_deliveries_call_event"),
        Index("ix_webhook_deliveries_due", "status", "next_at"),
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)  # the event id
    event_type: Mapped[str] = mapped_column(String(32))  # call.ended
    call_id: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(String(2048))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # pending | delivered | dropped
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(String(300))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
