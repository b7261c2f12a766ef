"""Scheduled messages (Letta's `agents.schedule`): one-time and recurring (cron) messages to an
agent, claimed by exactly one gateway when due (memory/orm/schedules.py).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_messages",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("scheduled_at", sa.Float(precision=53), nullable=True),
        sa.Column("cron_expression", sa.String(200), nullable=True),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("next_run_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_scheduled_messages_agent_seq", "scheduled_messages", ["agent_id", "seq"])
    op.create_index("ix_scheduled_messages_next_run_at", "scheduled_messages", ["next_run_at"])


def downgrade() -> None:
    op.drop_table("scheduled_messages")
