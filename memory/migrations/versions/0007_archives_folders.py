"""Archives, folders and files (Letta's shared archival memory and data sources).

- folders, files, folders_agents: uploaded documents, their processing status and text;
- archives, archives_agents: a passage now belongs to an archive; every agent gets its own
  default archive (`archive-<agent uuid>`, `agent_id` set) holding ALL its existing passages;
  shared archives attach to several agents; a folder's chunks live in the folder's archive;
- passages: archive_id (NOT NULL, cascade), file_id (a file's chunk), agent_id nullable
  (a shared archive's passage belongs to no agent);
- blocks.file_id: an open file's window shown in the context (scope "file").

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import memory.orm

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _ts(name: str) -> sa.Column[object]:
    return sa.Column(name, memory.orm.UTCDateTime(), nullable=False)


def _fk(name: str, target: str, **kw: object) -> sa.Column[object]:
    return sa.Column(name, sa.String(64), sa.ForeignKey(target, ondelete="CASCADE"), **kw)  # type: ignore[arg-type]


def upgrade() -> None:
    op.create_table(
        "folders",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(64), nullable=True, index=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("instructions", sa.Text(), nullable=True),
        sa.Column("embedding", sa.String(200), nullable=False),
        sa.Column("chunk_size", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
    )
    op.create_table(
        "files",
        sa.Column("id", sa.String(64), primary_key=True),
        _fk("folder_id", "folders.id", nullable=False, index=True),
        sa.Column("user_id", sa.String(64), nullable=True),
        sa.Column("file_name", sa.String(300), nullable=False),
        sa.Column("original_file_name", sa.String(300), nullable=False),
        sa.Column("file_type", sa.String(100), nullable=False),
        sa.Column("file_size", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(12), nullable=False),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("total_chunks", sa.Integer(), nullable=True),
        sa.Column("chunks_embedded", sa.Integer(), nullable=True),
        sa.Column("pages", sa.Integer(), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        _ts("created_at"),
        _ts("updated_at"),
    )
    op.create_table(
        "folders_agents",
        _fk("folder_id", "folders.id", primary_key=True),
        _fk("agent_id", "agents.id", primary_key=True, index=True),
    )
    op.create_table(
        "archives",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.String(64), nullable=True, index=True),
        _fk("agent_id", "agents.id", nullable=True, index=True),
        _fk("folder_id", "folders.id", nullable=True, index=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("embedding", sa.String(200), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("deletes", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
    )
    op.create_table(
        "archives_agents",
        _fk("archive_id", "archives.id", primary_key=True),
        _fk("agent_id", "agents.id", primary_key=True, index=True),
    )
    # every agent's own archive: its existing passages move there
    uuid = "(CASE WHEN id LIKE 'agent-%' THEN substr(id, 7) ELSE id END)"
    op.execute(
        "INSERT INTO archives (id, user_id, agent_id, name, embedding, metadata, version, "
        f"deletes, created_at, updated_at) SELECT 'archive-' || {uuid}, user_id, id, "
        "name || '''s archive', embedding, '{}', 0, 0, created_at, created_at FROM agents"
    )
    with op.batch_alter_table("passages") as b:
        b.add_column(sa.Column("archive_id", sa.String(64), nullable=True))
        b.add_column(sa.Column("file_id", sa.String(64), nullable=True))
    op.execute(
        "UPDATE passages SET archive_id = 'archive-' || "
        "(CASE WHEN agent_id LIKE 'agent-%' THEN substr(agent_id, 7) ELSE agent_id END)"
    )
    with op.batch_alter_table("passages") as b:
        b.alter_column("archive_id", existing_type=sa.String(64), nullable=False)
        b.alter_column("agent_id", existing_type=sa.String(64), nullable=True)
        b.create_foreign_key(
            "fk_passages_archive", "archives", ["archive_id"], ["id"], ondelete="CASCADE"
        )
        b.create_foreign_key("fk_passages_file", "files", ["file_id"], ["id"], ondelete="CASCADE")
        b.create_index("ix_passages_archive_seq", ["archive_id", "seq"])
        b.create_index("ix_passages_file_id", ["file_id"])
    with op.batch_alter_table("blocks") as b:
        b.add_column(sa.Column("file_id", sa.String(64), nullable=True))
        b.create_foreign_key("fk_blocks_file", "files", ["file_id"], ["id"], ondelete="CASCADE")
    # SQLite rebuilt the table without its expression index (migration 0005's)
    op.create_index(
        "uq_blocks_agent_label_identity",
        "blocks",
        ["agent_id", "label", sa.text("coalesce(identity_id, '')")],
        unique=True,
        if_not_exists=True,
    )


def downgrade() -> None:
    raise NotImplementedError("0007 (archives, folders and files) cannot be downgraded")
