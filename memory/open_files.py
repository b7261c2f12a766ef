"""An agent's open files: read-only blocks of scope "file" holding a numbered window of the
file's lines, shown in the context window (memory.blocks.compile_blocks), at most
`max_open` at once (the least recently used closes first, as in Letta: opening a file again
counts as a use). The one home of that state: the `open_files` tool, the
`/v1/agents/{id}/files` routes and agent-file import all go through it."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.files import FileData
from memory.ids import new_id, utcnow
from memory.orm import Block, FileRecord, Folder, FolderAgent

DEFAULT_MAX_OPEN = 5
WINDOW_LINES = 100
WINDOW_CHARS = 8000
_LINES = re.compile(r": lines (\d+)-(\d+) of \d+$")


def max_open(metadata: dict[str, Any]) -> int:
    """The agent's `max_files_open` (agent metadata), default 5."""
    value = metadata.get("max_files_open")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return DEFAULT_MAX_OPEN


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


def describe(name: str, content: str, first: int, last: int) -> str:
    """An open window's description (shown in the prompt); `shown_lines` reads it back."""
    return f"{name}: lines {first}-{last} of {len(content.splitlines())}"


def shown_lines(description: str | None) -> tuple[int | None, int | None]:
    found = _LINES.search(description or "")
    return (int(found[1]), int(found[2])) if found else (None, None)


def relation_id(agent_id: str, file_id: str) -> str:
    """A stable id of the agent-file pair (Letta's file-agent relationship id)."""
    return f"file_agent-{uuid.uuid5(uuid.NAMESPACE_URL, f'{agent_id}/{file_id}')}"


@dataclass(slots=True)
class AgentFile:
    """A file of a folder attached to the agent, and whether the agent has it open."""

    id: str
    file_id: str
    file_name: str
    folder_id: str
    folder_name: str
    created_at: datetime
    is_open: bool = False
    visible_content: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    last_accessed_at: datetime | None = None


async def open_in(
    s: AsyncSession, agent_id: str, file_id: str, label: str, text: str, description: str,
    limit: int, when: datetime | None = None,
) -> list[str]:  # fmt: skip
    """Show `text` as the file's block (inside the caller's transaction); returns the labels
    closed to stay within `limit` open files."""
    now = when or utcnow()
    row = await s.scalar(select(Block).where(Block.agent_id == agent_id, Block.file_id == file_id))
    if row is None:
        clash = await s.scalar(
            select(Block.id).where(
                Block.agent_id == agent_id, Block.label == label, Block.identity_id.is_(None)
            )
        )
        if clash is not None:
            label = f"{label[:60]}#{file_id[-8:]}"
        row = Block(
            id=new_id("block"), agent_id=agent_id, label=label[:100], scope="file",
            file_id=file_id, read_only=True, version=1, created_at=now,
        )  # fmt: skip
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
    closed = opened[max(1, limit) :]
    for old in closed:
        await s.delete(old)
    return [b.label for b in closed]


class OpenFiles:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(
        self, agent_id: str, file_id: str, label: str, text: str, description: str, limit: int
    ) -> list[str]:
        """Show `text` as the file's block; returns the labels closed to stay in `limit`."""
        async with self.db.write() as s:
            return await open_in(s, agent_id, file_id, label, text, description, limit)

    async def open_window(
        self, agent_id: str, file: FileData, name: str, limit: int,
        offset: int = 0, length: int | None = None,
    ) -> tuple[str, str, list[str]]:  # fmt: skip
        """Open a window of the file's lines: (its description, its text, labels closed)."""
        content = file.content or ""
        text, first, last = window(content, offset, length)
        desc = describe(name, content, first, last)
        return desc, text, await self.open(agent_id, file.id, name, text, desc, limit)

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

    async def listing(self, agent_id: str) -> list[AgentFile]:
        """Every file of the folders attached to the agent, oldest first, with its state."""
        async with self.db.read() as s:
            q = (
                select(FileRecord.id, FileRecord.file_name, Folder.id, Folder.name)
                .add_columns(FileRecord.created_at)
                .join(Folder, Folder.id == FileRecord.folder_id)
                .join(FolderAgent, FolderAgent.folder_id == Folder.id)
                .where(FolderAgent.agent_id == agent_id)
                .order_by(FileRecord.created_at, FileRecord.id)
            )
            rows = (await s.execute(q)).all()
            blocks = {
                b.file_id: b
                for b in await s.scalars(
                    select(Block).where(Block.agent_id == agent_id, Block.scope == "file")
                )
            }
        out: list[AgentFile] = []
        for file_id, file_name, folder_id, folder_name, created_at in rows:
            f = AgentFile(
                relation_id(agent_id, file_id), file_id, file_name, folder_id, folder_name,
                created_at,
            )  # fmt: skip
            block = blocks.get(file_id)
            if block is not None:
                f.is_open, f.visible_content, f.last_accessed_at = (
                    True,
                    block.value,
                    block.updated_at,
                )
                f.start_line, f.end_line = shown_lines(block.description)
            out.append(f)
        return out
