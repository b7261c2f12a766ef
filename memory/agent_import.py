"""Write imported agents (an agent file, docs/rest_api.md "Agent files") in ONE transaction:
the agents, their blocks, default archives and conversations, their custom tools, their
message history, and the file's folders and files attached to them (open ones shown).
Everything is checked before this runs; a failure here (a tool name taken by a concurrent
writer, a database error) rolls the whole import back: nothing half-imported."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from memory.agents import AGENT_FIELDS, own_archive
from memory.blocks import BlockStore
from memory.db import Database
from memory.files import FolderStore, unique_name
from memory.ids import default_conversation_id, new_id, utcnow
from memory.models import BlockSpec, MessageData
from memory.open_files import describe, max_open, open_in
from memory.orm import Agent, Conversation, FileRecord, Folder, FolderAgent, Message, Tool

TOOL_FIELDS = ("description", "json_schema", "source_code", "tags", "return_char_limit")


@dataclass
class ToolPlan:
    """A custom tool of the file, its source already parsed and checked."""

    name: str
    description: str | None
    json_schema: dict[str, Any]
    source_code: str
    tags: list[str] = field(default_factory=list)
    return_char_limit: int | None = None


@dataclass
class FolderPlan:
    """A source (folder) of the file; `key` is its id in the file."""

    key: str
    name: str
    embedding: str
    chunk_size: int
    description: str | None = None
    instructions: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class FilePlan:
    """A file of a folder with its text (None: stored as failed, with `error`)."""

    key: str
    folder_key: str
    file_name: str
    file_type: str
    size: int
    content: str | None
    error: str | None = None


@dataclass
class OpenPlan:
    """An open file of an agent: the window of lines it shows."""

    file_key: str
    text: str
    first: int
    last: int
    when: datetime | None = None


@dataclass
class AgentPlan:
    fields: dict[str, Any]  # AGENT_FIELDS: name, system, model, embedding, tool_names, ...
    blocks: list[BlockSpec]
    messages: list[MessageData]  # agent_id / conversation_id are set here; in order
    folder_keys: list[str] = field(default_factory=list)
    open_files: list[OpenPlan] = field(default_factory=list)


@dataclass
class Imported:
    agent_ids: list[str]
    files: list[tuple[str, str, str]] = field(default_factory=list)  # (folder, file, text)


async def _folders(
    s: AsyncSession, user_id: str | None, folders: Sequence[FolderPlan], files: Sequence[FilePlan]
) -> tuple[dict[str, Folder], dict[str, FileRecord]]:
    """The file's folders (a name you already use gets a suffix, as in Letta) and files."""
    made: dict[str, Folder] = {}
    used: set[str] = set()
    for f in folders:
        name = f.name
        while name in used or await FolderStore.name_taken(s, user_id, name):
            name = f"{f.name[:190]}_{uuid.uuid4().hex[:8]}"
        used.add(name)
        row = Folder(
            id=new_id("source"), user_id=user_id, name=name, embedding=f.embedding,
            description=f.description, instructions=f.instructions, chunk_size=f.chunk_size,
            metadata_=f.metadata, created_at=utcnow(), updated_at=utcnow(),
        )  # fmt: skip
        await FolderStore.add_rows(s, row)
        made[f.key] = row
    records: dict[str, FileRecord] = {}
    names: dict[str, set[str]] = {}
    for p in files:
        folder = made[p.folder_key]
        name = unique_name(p.file_name, names.setdefault(p.folder_key, set()))
        names[p.folder_key].add(name)
        records[p.key] = FileRecord(
            id=new_id("file"), folder_id=folder.id, user_id=user_id, file_name=name,
            original_file_name=p.file_name, file_type=p.file_type, file_size=p.size,
            status="pending" if p.content is not None else "error", error_message=p.error,
            content=p.content, created_at=utcnow(), updated_at=utcnow(),
        )  # fmt: skip
        s.add(records[p.key])
    await s.flush()
    return made, records


async def _attach(
    s: AsyncSession, agent_id: str, plan: AgentPlan, made: dict[str, Folder],
    records: dict[str, FileRecord],
) -> None:  # fmt: skip
    """The agent's folders and its open files (the most recently used within its limit)."""
    for key in dict.fromkeys(plan.folder_keys):
        s.add(FolderAgent(folder_id=made[key].id, agent_id=agent_id))
    limit = max_open(plan.fields.get("metadata") or {})
    oldest_first = sorted(plan.open_files, key=lambda o: o.when or datetime.min.replace(tzinfo=UTC))
    for o in oldest_first:
        rec = records[o.file_key]
        folder = next(f for f in made.values() if f.id == rec.folder_id)
        name = f"{folder.name}/{rec.file_name}"
        desc = describe(name, rec.content or "", o.first, o.last)
        await open_in(s, agent_id, rec.id, name, o.text, desc, limit, o.when)


async def import_agents(
    db: Database,
    user_id: str | None,
    agents: Sequence[AgentPlan],
    tools: Sequence[ToolPlan],
    *,
    override_tools: bool,
    folders: Sequence[FolderPlan] = (),
    files: Sequence[FilePlan] = (),
) -> Imported:
    """Create the agents (ids in file order), with the file's folders and files (their text to
    chunk and embed in `Imported.files`). A custom tool of a name the user already has is
    replaced by the file's (`override_tools`) or kept as it is."""
    ids = [new_id("agent") for _ in agents]
    async with db.write() as s:
        made, records = await _folders(s, user_id, folders, files)
        for tool in tools:
            owned = Tool.user_id.is_(None) if user_id is None else Tool.user_id == user_id
            row = await s.scalar(select(Tool).where(Tool.name == tool.name, owned))
            if row is None:
                row = Tool(id=new_id("tool"), user_id=user_id, name=tool.name, created_at=utcnow())
                s.add(row)
            elif not override_tools:
                continue
            for key in TOOL_FIELDS:
                setattr(row, key, getattr(tool, key))
            row.source_type = "python"
        for agent_id, plan in zip(ids, agents, strict=True):
            values = {k: v for k, v in plan.fields.items() if k in AGENT_FIELDS}
            values["metadata_"] = values.pop("metadata", None) or {}
            s.add(Agent(id=agent_id, user_id=user_id, **values))
            await s.flush()
            s.add(own_archive(agent_id, user_id, str(values.get("name") or "agent"), values))
            BlockStore.add_specs(s, agent_id, plan.blocks)
            conv_id = default_conversation_id(agent_id)
            s.add(
                Conversation(
                    id=conv_id,
                    agent_id=agent_id,
                    user_id=user_id,
                    source="text",
                    messages_version=1 if plan.messages else 0,
                )
            )
            await s.flush()
            for m in plan.messages:  # inserted in the order added: seq follows the file's
                m.agent_id, m.conversation_id = agent_id, conv_id
                m.created_at = m.created_at or utcnow()
                s.add(Message(**m.model_dump(exclude={"seq"})))
            await s.flush()
            await _attach(s, agent_id, plan, made, records)
    jobs = [(r.folder_id, r.id, r.content) for r in records.values() if r.content is not None]
    return Imported(ids, jobs)
