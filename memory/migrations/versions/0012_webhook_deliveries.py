"""Webhook deliveries: the `call.ended` events queued for the operator's endpoint, with their
attempts, next due time and outcome (memory/orm/webhooks.py).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(32), nullable=False),
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("last_error", sa.String(300), nullable=True),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("finished_at", memory.orm.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sa.UniqueConstraint("call_id", "event_type", name="uq_webhook_deliveries_call_event"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["status", "next_at"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
