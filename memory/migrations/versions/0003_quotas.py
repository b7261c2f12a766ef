"""Rate limits and quotas: per-user overrides (user_limits) and call seconds per identity
and UTC day (call_usage), shared by every gateway instance on the database.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_limits",
        sa.Column("user_id", sa.String(length=64), nullable=False),
        sa.Column("rps", sa.Float(), nullable=True),
        sa.Column("burst", sa.Integer(), nullable=True),
        sa.Column("max_calls", sa.Integer(), nullable=True),
        sa.Column("call_minutes", sa.Float(), nullable=True),
        sa.Column("updated_at", memory.orm.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id"),
    )
    op.create_table(
        "call_usage",
        sa.Column("identity", sa.String(length=200), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", memory.orm.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("identity", "day"),
    )


def downgrade() -> None:
    op.drop_table("call_usage")
    op.drop_table("user_limits")
