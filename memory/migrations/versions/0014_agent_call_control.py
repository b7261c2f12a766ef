"""Agents: call control's `transfer_targets` (name -> number or SIP URI) and `call_tools`
(the call tools its calls are offered; null: all).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as b:
        b.add_column(sa.Column("transfer_targets", sa.JSON(), nullable=False, server_default="{}"))
        b.add_column(sa.Column("call_tools", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as b:
        b.drop_column("call_tools")
        b.drop_column("transfer_targets")
