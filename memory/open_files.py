"""An agent's open files: read-only blocks of scope "file" holding a numbered window of the
file's lines, shown in the context window (memory.blocks.compile_blocks), at most
`max_open` at once (the least recently used closes first, as in Letta: opening a file again
counts as a use). The one home of that state: the `open_files` tool, the
`/v1/agents/{id}/files` routes and agent-file import all go through it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import BlockData, FolderView
from memory.orm import Agent, Block, FileRecord, Folder, FolderAgent

DEFAULT_MAX_OPEN = 5
WINDOW_CHARS = 15000  # an open file's window, unless the agent has its own
_LINES = re.compile(r": lines (\d+)-(\d+) of \d+$")


def _positive(metadata: dict[str, Any], key: str, default: int) -> int:
    value = metadata.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


def max_open(metadata: dict[str, Any]) -> int:
    """The agent's `max_files_open` (agent metadata), default 5."""
    return _positive(metadata, "max_files_open", DEFAULT_MAX_OPEN)


def window_chars(metadata: dict[str, Any]) -> int:
    """The agent's `per_file_view_window_char_limit` (agent metadata), default 15000."""
    return _positive(metadata, "per_file_view_window_char_limit", WINDOW_CHARS)


def window(
    content: str, offset: int | None = None, length: int | None = None, chars: int = WINDOW_CHARS
) -> tuple[str, int, int]:
    """Lines offset+1 .. offset+length (to the end without `length`), numbered after a header
    saying which (Letta's "[Viewing file start (out of N lines)]" when no range was asked),
    cut at `chars` characters: (text, first, last)."""
    lines = content.splitlines() or [""]
    start = max(0, min(offset or 0, len(lines) - 1))
    stop = len(lines) if length is None else min(len(lines), start + max(1, length))
    if offset is None and length is None:
        head = f"[Viewing file start (out of {len(lines)} lines)]"
    elif length is None:
        head = f"[Viewing lines {start + 1} to end (out of {len(lines)} lines)]"
    else:
        head = f"[Viewing lines {start + 1} to {stop} (out of {len(lines)} lines)]"
    out = [head]
    size = len(head)
    for number in range(start + 1, stop + 1):
        row = f"{number}: {lines[number - 1]}"
        if len(out) > 1 and size + 1 + len(row) > chars:
            break
        out.append(row[: max(0, chars - size - 1)])
        size += len(row) + 1
    return "\n".join(out), start + 1, start + len(out) - 1


def describe(name: str, content: str, first: int, last: int) -> str:
    """An open window's description (shown in the prompt); `shown_lines` reads it back."""
    return f"{name}: lines {first}-{last} of {len(content.splitlines())}"


def shown_lines(description: str | None) -> tuple[int | None, int | None]:
    found = _LINES.search(description or "")
    return (int(found[1]), int(found[2])) if found else (None, None)


def relation_id(agent_id: str, file_id: str) -> str:
    """A stable id of the agent-file pair (Letta's file-agent relationship id)."""
    return f"file_agent-{uuid.uuid5(uuid.NAMESPACE_URL, f'{agent_id}/{file_id}')}"


class Readable(Protocol):
    """A file with its text (memory.files.FileData)."""

    @property
    def id(self) -> str: ...
    @property
    def content(self) -> str | None: ...


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


async def open_whole(
    s: AsyncSession, agent: Agent, file_ids: list[str] | None = None, folder_id: str | None = None
) -> list[str]:
    """Open files of the agent's folders from their start, as Letta does when a folder is
    attached (`folder_id`: its files) or a file of an attached folder has its text
    (`file_ids`): the newest within the agent's `max_files_open`, each window cut at its
    `per_file_view_window_char_limit`. Returns the labels closed to make room."""
    limit, chars = max_open(agent.metadata_ or {}), window_chars(agent.metadata_ or {})
    q = (
        select(FileRecord.id, FileRecord.file_name, FileRecord.content, Folder.name)
        .join(Folder, Folder.id == FileRecord.folder_id)
        .where(FileRecord.content.is_not(None))
        .order_by(FileRecord.created_at.desc(), FileRecord.id.desc())
        .limit(limit)
    )
    if folder_id is not None:
        q = q.where(FileRecord.folder_id == folder_id)
    if file_ids is not None:
        q = q.where(FileRecord.id.in_(file_ids))
    closed: list[str] = []
    for file_id, file_name, content, folder_name in reversed((await s.execute(q)).all()):
        name, content = f"{folder_name}/{file_name}", content or ""
        text, first, last = window(content, chars=chars)
        desc = describe(name, content, first, last)
        closed += await open_in(s, agent.id, file_id, name, text, desc, limit)
    return closed


async def open_for_attached(db: Database, file_id: str) -> list[str]:
    """A file has its text: open it for every agent its folder is attached to. Returns those
    agents (their prompts change)."""
    async with db.write() as s:
        q = (
            select(Agent)
            .join(FolderAgent, FolderAgent.agent_id == Agent.id)
            .join(FileRecord, FileRecord.folder_id == FolderAgent.folder_id)
            .where(FileRecord.id == file_id)
        )
        agents = list(await s.scalars(q))
        for agent in agents:
            await open_whole(s, agent, file_ids=[file_id])
        return [a.id for a in agents]


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
        self, agent_id: str, file: Readable, name: str, limit: int,
        offset: int | None = None, length: int | None = None, chars: int = WINDOW_CHARS,
    ) -> tuple[str, str, list[str]]:  # fmt: skip
        """Open a window of the file's lines: (its description, its text, labels closed)."""
        content = file.content or ""
        text, first, last = window(content, offset, length, chars)
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


def compile_directories(
    folders: Sequence[FolderView], blocks: Sequence[BlockData], metadata: dict[str, Any],
    text: bool = True,
) -> str:  # fmt: skip
    """The prompt's `<directories>` (Letta's layout): the folders attached to the agent, each
    file open (with its window of lines, unless not `text`) or closed. Empty without folders."""
    if not folders:
        return ""
    shown = {b.file_id: b for b in blocks if b.scope == "file"}
    limit = max_open(metadata)
    parts = [
        "<directories>",
        f"<file_limits>\n- current_files_open={len(shown)}\n- max_files_open={limit}\n"
        "</file_limits>",
    ]
    for folder in folders:
        parts.append(f'<directory name="{folder.name}">')
        if folder.description:
            parts.append(f"<description>{folder.description}</description>")
        if folder.instructions:
            parts.append(f"<instructions>{folder.instructions}</instructions>")
        for file_id, file_name in folder.files:
            block = shown.get(file_id)
            status = "open" if block is not None else "closed"
            parts.append(f'<file status="{status}" name="{folder.name}/{file_name}">')
            if block is not None and text:
                parts.append(
                    f"<metadata>\n- read_only=true\n- chars_current={len(block.value)}\n"
                    f"- chars_limit={window_chars(metadata)}\n</metadata>\n"
                    f"<value>\n{block.value}\n</value>"
                )
            parts.append("</file>")
        parts.append("</directory>")
    parts.append("</directories>")
    return "\n".join(parts)
