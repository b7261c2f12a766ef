"""Tools: agents' tool rules (Letta's `tool_rules`, as data), MCP servers (secrets encrypted
at rest) and the MCP tools they serve (`tools.mcp_server_id`).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as b:
        b.add_column(sa.Column("tool_rules", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("tools") as b:
        b.add_column(sa.Column("mcp_server_id", sa.String(64), nullable=True))
    op.create_index("ix_tools_mcp_server_id", "tools", ["mcp_server_id"])
    op.create_table(
        "mcp_servers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("server_name", sa.String(100), nullable=False),
        sa.Column("server_type", sa.String(20), nullable=False),
        sa.Column("server_url", sa.Text(), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("secrets", sa.Text(), nullable=True),
        sa.Column("voice_safe_tools", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("updated_at", memory.orm.UTCDateTime(), nullable=False),
    )
    op.create_index("ix_mcp_servers_user_id", "mcp_servers", ["user_id"])
    op.create_index(
        "uq_mcp_servers_owner_name",
        "mcp_servers",
        [sa.text("coalesce(user_id, '')"), "server_name"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("uq_mcp_servers_owner_name", table_name="mcp_servers")
    op.drop_index("ix_mcp_servers_user_id", table_name="mcp_servers")
    op.drop_table("mcp_servers")
    op.drop_index("ix_tools_mcp_server_id", table_name="tools")
    with op.batch_alter_table("tools") as b:
        b.drop_column("mcp_server_id")
    with op.batch_alter_table("agents") as b:
        b.drop_column("tool_rules")
