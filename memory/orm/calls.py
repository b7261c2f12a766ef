"""Call records: one row per phone, browser or WebRTC call, inbound or outbound
(memory/calls.py). `history` is the time-stamped list of statuses the call went through;
`caller` is the caller key (a phone number for Twilio calls: it is never logged whole)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from memory.ids import utcnow
from memory.orm.base import Base, UTCDateTime


class CallRecord(Base):
    __tablename__ = "calls"
    __table_args__ = (
        Index("ix_calls_agent_seq", "agent_id", "seq"),
        Index("ix_calls_user_seq", "user_id", "seq"),
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    user_id: Mapped[str | None] = mapped_column(String(64))  # the agent's owner
    direction: Mapped[str] = mapped_column(String(16))  # inbound | outbound
    transport: Mapped[str] = mapped_column(String(16))  # browser | twilio | webrtc
    caller: Mapped[str | None] = mapped_column(String(256), index=True)
    status: Mapped[str] = mapped_column(String(24), index=True)
    history: Mapped[list[dict[str, Any]]] = mapped_column(JSON)  # [{status, at}]
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    end_reason: Mapped[str | None] = mapped_column(String(32))
    conversation_id: Mapped[str | None] = mapped_column(String(64))
    vendor_call_id: Mapped[str | None] = mapped_column(String(64), index=True)  # Twilio CallSid
    # how an outbound call was asked for: first_message, machine_detection, record
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    extra: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    # the call's WAV (voice_gateway/recording.py), until retention or erasure removes it
    recording_path: Mapped[str | None] = mapped_column(String(1024))
