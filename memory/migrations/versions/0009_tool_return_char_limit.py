"""Tools: Letta's per-tool `return_char_limit` (null: the server's VG_TOOL_RETURN_CHAR_LIMIT).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tools") as b:
        b.add_column(sa.Column("return_char_limit", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tools") as b:
        b.drop_column("return_char_limit")
