"""Runs and steps (Letta's runs API): every agent request is a run, every model call in it a
step, written by the agent loop in the step's own transaction; messages get `otid` (the
client's offline threading id).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _ns() -> sa.BigInteger:
    return sa.BigInteger()


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("identity_id", sa.String(64), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("background", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.String(48), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("step_count", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("ttft_ns", _ns(), nullable=True),
        sa.Column("total_duration_ns", _ns(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("request_config", sa.JSON(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("completed_at", memory.orm.UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["conversation_id"], ["conversations.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_runs_agent_seq", "runs", ["agent_id", "seq"])
    op.create_index("ix_runs_conversation_id", "runs", ["conversation_id"])
    op.create_index("ix_runs_identity_id", "runs", ["identity_id"])
    op.create_table(
        "steps",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("agent_id", sa.String(64), nullable=False),
        sa.Column("conversation_id", sa.String(64), nullable=True),
        sa.Column("identity_id", sa.String(64), nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stop_reason", sa.String(48), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("step_start_ns", _ns(), nullable=True),
        sa.Column("step_ns", _ns(), nullable=True),
        sa.Column("llm_request_ns", _ns(), nullable=True),
        sa.Column("ttft_ns", _ns(), nullable=True),
        sa.Column("tool_execution_ns", _ns(), nullable=True),
        sa.Column("feedback", sa.String(10), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_steps_agent_seq", "steps", ["agent_id", "seq"])
    op.create_index("ix_steps_run_id", "steps", ["run_id"])
    with op.batch_alter_table("messages") as b:
        b.add_column(sa.Column("otid", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as b:
        b.drop_column("otid")
    op.drop_table("steps")
    op.drop_table("runs")
