"""tools: one name per owner, enforced by the database (a unique index on
(coalesce(user_id, ''), name)), so two concurrent creates on PostgreSQL cannot both succeed.
SQLite already serialises writers (BEGIN IMMEDIATE); the index makes both backends agree.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "uq_tools_owner_name",
        "tools",
        [sa.text("coalesce(user_id, '')"), "name"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_tools_owner_name", table_name="tools")
