"""An agent's open files: read-only blocks of scope "file" holding a numbered window of the
file's lines, shown in the context window (memory.blocks.compile_blocks), at most
`max_open` at once (the least recently opened closes first, as in Letta)."""

from __future__ import annotations

from sqlalchemy import delete, select

from memory.db import Database
from memory.orm import Block, new_id, utcnow

DEFAULT_MAX_OPEN = 5
WINDOW_LINES = 100
WINDOW_CHARS = 8000


def window(content: str, offset: int = 0, length: int | None = None) -> tuple[str, int, int]:
    """Lines offset+1 .. offset+length, numbered, cut at WINDOW_CHARS: (text, first, last)."""
    lines = content.split("\n")
    offset = max(0, min(offset, max(0, len(lines) - 1)))
    count = max(1, min(length or WINDOW_LINES, 1000))
    out: list[str] = []
    size = 0
    for number, line in enumerate(lines[offset : offset + count], start=offset + 1):
        row = f"{number}: {line}"
        if out and size + len(row) > WINDOW_CHARS:
            break
        out.append(row[:WINDOW_CHARS])
        size += len(row) + 1
    return "\n".join(out), offset + 1, offset + len(out)


class OpenFiles:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(
        self, agent_id: str, file_id: str, label: str, text: str, description: str, max_open: int
    ) -> list[str]:
        """Show `text` as the file's block; returns the labels closed to stay in `max_open`."""
        now = utcnow()
        async with self.db.write() as s:
            row = await s.scalar(
                select(Block).where(Block.agent_id == agent_id, Block.file_id == file_id)
            )
            if row is None:
                clash = await s.scalar(
                    select(Block.id).where(
                        Block.agent_id == agent_id,
                        Block.label == label,
                        Block.identity_id.is_(None),
                    )
                )
                if clash is not None:
                    label = f"{label[:60]}#{file_id[-8:]}"
                row = Block(
                    id=new_id("block"),
                    agent_id=agent_id,
                    label=label[:100],
                    scope="file",
                    file_id=file_id,
                    read_only=True,
                    version=1,
                    created_at=now,
                )
                s.add(row)
            else:
                row.version += 1
            row.value, row.limit, row.description, row.updated_at = (
                text,
                max(len(text), 1),
                description,
                now,
            )
            await s.flush()
            opened = list(
                await s.scalars(
                    select(Block)
                    .where(Block.agent_id == agent_id, Block.scope == "file")
                    .order_by(Block.updated_at.desc(), Block.id)
                )
            )
            closed = opened[max(1, max_open) :]
            for old in closed:
                await s.delete(old)
            return [b.label for b in closed]

    async def close(self, agent_id: str, file_ids: list[str] | None = None) -> list[str]:
        """Close the given files (None: all); returns the labels closed."""
        async with self.db.write() as s:
            q = select(Block).where(Block.agent_id == agent_id, Block.scope == "file")
            if file_ids is not None:
                q = q.where(Block.file_id.in_(file_ids))
            rows = list(await s.scalars(q))
            if rows:
                await s.execute(delete(Block).where(Block.id.in_([r.id for r in rows])))
            return [r.label for r in rows]
