"""Many callers on one agent: conversations own their context, callers (identities) own their
blocks, shared blocks attach to several agents.

- identities, identities_agents: callers (Letta identities) and the agents they call;
- conversations: caller, summary, model, archived, messages_version (the context cache's
  version, per conversation now), updated_at;
- every agent gets its default conversation (`conv-default-<agent uuid>`); the previous
  release had exactly one context per agent, so ALL its messages move there (the per-call
  conversation rows of that release only tagged messages and are dropped);
- messages.conversation_id becomes NOT NULL with a foreign key (ON DELETE CASCADE): a message
  lives and dies with its conversation, and nothing can be written into a deleted one;
- messages, passages, outbox: identity_id (the caller) for scoping and erasure;
- blocks: agent_id nullable (standalone shared blocks), user_id, identity_id, scope; the
  `human` block becomes a caller template (scope "caller"); one label per (agent, caller);
- blocks_agents: shared blocks attached to agents;
- sleeptime_state: keyed by (agent_id, identity_id) ("" = no caller).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _now() -> sa.TextClause:
    return sa.text("CURRENT_TIMESTAMP")


def upgrade() -> None:
    op.create_table(
        "identities",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(64), nullable=True, index=True),
        sa.Column("identifier_key", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("identity_type", sa.String(20), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("created_at", memory.orm.UTCDateTime(), nullable=False),
        sa.Column("updated_at", memory.orm.UTCDateTime(), nullable=False),
    )
    op.create_index(
        "uq_identities_owner_key",
        "identities",
        [sa.text("coalesce(user_id, '')"), "identifier_key"],
        unique=True,
    )
    _agent_link("identities_agents", "identity_id", "identities.id")

    with op.batch_alter_table("conversations") as b:
        b.add_column(sa.Column("identity_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("user_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("summary", sa.Text(), nullable=True))
        b.add_column(sa.Column("model", sa.String(200), nullable=True))
        b.add_column(sa.Column("archived", sa.Boolean(), nullable=False, server_default=sa.false()))
        b.add_column(
            sa.Column("messages_version", sa.Integer(), nullable=False, server_default="0")
        )
        b.add_column(
            sa.Column("updated_at", memory.orm.UTCDateTime(), nullable=False, server_default=_now())
        )
        b.create_foreign_key(
            "fk_conversations_identity", "identities", ["identity_id"], ["id"], ondelete="CASCADE"
        )
        b.create_index("ix_conversations_identity_id", ["identity_id"])
        b.create_index("ix_conversations_agent_identity", ["agent_id", "identity_id"])

    # every agent's default conversation; the old per-call rows only tagged messages
    op.execute("DELETE FROM conversations")
    op.execute(
        "INSERT INTO conversations (id, agent_id, user_id, source, archived, messages_version, "
        "created_at, updated_at, last_active_at) "
        "SELECT 'conv-default-' || "
        + _strip_prefix("id")
        + ", id, user_id, 'text', "
        + _false()
        + ", messages_version, created_at, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM agents"
    )
    op.execute(
        "UPDATE messages SET conversation_id = 'conv-default-' || " + _strip_prefix("agent_id")
    )
    with op.batch_alter_table("messages") as b:
        b.drop_index("ix_messages_conversation_id")
        b.alter_column("conversation_id", existing_type=sa.String(64), nullable=False)
        b.add_column(sa.Column("identity_id", sa.String(64), nullable=True))
        b.create_foreign_key(
            "fk_messages_conversation",
            "conversations",
            ["conversation_id"],
            ["id"],
            ondelete="CASCADE",
        )
        b.create_index("ix_messages_conversation_seq", ["conversation_id", "seq"])
        b.create_index("ix_messages_identity_id", ["identity_id"])

    with op.batch_alter_table("passages") as b:
        b.add_column(sa.Column("identity_id", sa.String(64), nullable=True))
        b.create_index("ix_passages_identity_id", ["identity_id"])
    with op.batch_alter_table("outbox") as b:
        b.add_column(sa.Column("identity_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("conversation_id", sa.String(64), nullable=True))
        b.create_foreign_key(
            "fk_outbox_conversation",
            "conversations",
            ["conversation_id"],
            ["id"],
            ondelete="CASCADE",
        )
        b.create_index("ix_outbox_identity_id", ["identity_id"])
        b.create_index("ix_outbox_conversation_id", ["conversation_id"])

    with op.batch_alter_table("blocks") as b:
        b.drop_constraint("uq_blocks_agent_label", type_="unique")
        b.alter_column("agent_id", existing_type=sa.String(64), nullable=True)
        b.add_column(sa.Column("user_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("identity_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("scope", sa.String(10), nullable=False, server_default="agent"))
        b.create_foreign_key(
            "fk_blocks_identity", "identities", ["identity_id"], ["id"], ondelete="CASCADE"
        )
        b.create_index("ix_blocks_user_id", ["user_id"])
        b.create_index("ix_blocks_identity_id", ["identity_id"])
    op.create_index(
        "uq_blocks_agent_label_identity",
        "blocks",
        ["agent_id", "label", sa.text("coalesce(identity_id, '')")],
        unique=True,
    )
    op.execute("UPDATE blocks SET scope = 'caller' WHERE label = 'human'")
    _agent_link("blocks_agents", "block_id", "blocks.id")

    # a new primary key: a new table, the rows copied (same SQL on SQLite and PostgreSQL)
    op.create_table(
        "sleeptime_state_new",
        sa.Column(
            "agent_id",
            sa.String(64),
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("identity_id", sa.String(64), primary_key=True, server_default=""),
        sa.Column("pending_turns", sa.Integer(), nullable=False),
        sa.Column("pending_events", sa.JSON(), nullable=False),
        sa.Column("last_run_at", memory.orm.UTCDateTime(), nullable=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("lag_ms_last", sa.Float(), nullable=True),
    )
    op.execute(
        "INSERT INTO sleeptime_state_new (agent_id, identity_id, pending_turns, pending_events, "
        "last_run_at, runs, lag_ms_last) SELECT agent_id, '', pending_turns, pending_events, "
        "last_run_at, runs, lag_ms_last FROM sleeptime_state"
    )
    op.drop_table("sleeptime_state")
    op.rename_table("sleeptime_state_new", "sleeptime_state")


def _agent_link(table: str, column: str, target: str) -> None:
    """A join table (column -> target, agent_id -> agents.id), both cascading on delete."""
    op.create_table(
        table,
        sa.Column(
            column, sa.String(64), sa.ForeignKey(target, ondelete="CASCADE"), primary_key=True
        ),
        sa.Column(
            "agent_id",
            sa.String(64),
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
            index=True,
        ),
    )


def _strip_prefix(column: str) -> str:
    """`agent-<uuid>` -> `<uuid>` in SQL (memory.orm.default_conversation_id)."""
    return f"(CASE WHEN {column} LIKE 'agent-%' THEN substr({column}, 7) ELSE {column} END)"


def _false() -> str:
    return "false" if op.get_bind().dialect.name == "postgresql" else "0"


def downgrade() -> None:
    raise NotImplementedError("0005 (conversations and callers) cannot be downgraded")
