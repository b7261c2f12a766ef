"""Call records: every call's direction, transport, caller key, status history, times, end
reason, conversation and the vendor's call id (memory/orm/calls.py).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "calls",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("caller", sa.String(256), nullable=True),
        sa.Column("status", sa.String(24), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("answered_at", memory.orm.UTCDateTime(), nullable=True),
        sa.Column("ended_at", memory.orm.UTCDateTime(), nullable=True),
        sa.Column("end_reason", sa.String(32), nullable=True),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("vendor_call_id", sa.String(64), nullable=True),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_calls_agent_seq", "calls", ["agent_id", "seq"])
    op.create_index("ix_calls_user_seq", "calls", ["user_id", "seq"])
    op.create_index("ix_calls_caller", "calls", ["caller"])
    op.create_index("ix_calls_status", "calls", ["status"])
    op.create_index("ix_calls_vendor_call_id", "calls", ["vendor_call_id"])


def downgrade() -> None:
    op.drop_table("calls")
