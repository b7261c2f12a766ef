"""Folders and files: CRUD, attaching folders to agents (with the file tools), file status.

A folder's chunks are passages of the folder's own archive (memory/orm/sources.py), so file
search uses the archival index. Ownership as for archives: another user's folder or file is
'not found'.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import delete, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.archival import bump
from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import Conflict, NotFound
from memory.open_files import open_whole
from memory.orm import Agent, Archive, Block, FileRecord, Folder, FolderAgent

FILE_TOOLS = ["open_files", "grep_files", "semantic_search_files"]


class FolderData(BaseModel):
    id: str
    user_id: str | None = None
    name: str
    description: str | None = None
    instructions: str | None = None
    embedding: str
    chunk_size: int = 800
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


class FileData(BaseModel):
    model_config = {"from_attributes": True}
    id: str
    folder_id: str
    user_id: str | None = None
    file_name: str
    original_file_name: str
    file_type: str
    file_size: int
    status: str
    error_message: str | None = None
    total_chunks: int | None = None
    chunks_embedded: int | None = None
    pages: int | None = None
    content: str | None = None
    created_at: datetime
    updated_at: datetime


def _folder(row: Folder) -> FolderData:
    d = {c.key: getattr(row, c.key) for c in Folder.__mapper__.column_attrs}
    d["metadata"] = d.pop("metadata_") or {}
    return FolderData.model_validate(d)


def _visible(user_id: str | None, scoped: bool) -> Any:
    if not scoped:
        return True
    return Folder.user_id == user_id if user_id else Folder.user_id.is_(None)


class FolderStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self, user_id: str | None, name: str, embedding: str, **fields: Any
    ) -> FolderData:
        now = utcnow()
        row = Folder(
            id=new_id("source"),
            user_id=user_id,
            name=name,
            embedding=embedding,
            description=fields.get("description"),
            instructions=fields.get("instructions"),
            chunk_size=fields.get("chunk_size") or 800,
            metadata_=fields.get("metadata") or {},
            created_at=now,
            updated_at=now,
        )
        async with self.db.write() as s:
            if await self.name_taken(s, user_id, name):
                raise Conflict(f"a folder named '{name}' already exists")
            await self.add_rows(s, row)
        return _folder(row)

    @staticmethod
    async def name_taken(s: AsyncSession, user_id: str | None, name: str) -> bool:
        found = await s.scalar(
            select(Folder.id).where(Folder.name == name, _visible(user_id, True))
        )
        return found is not None

    @staticmethod
    async def add_rows(s: AsyncSession, row: Folder) -> None:
        """Add a folder and the archive that indexes its chunks (in the caller's transaction)."""
        s.add(row)
        await s.flush()
        s.add(
            Archive(
                id=new_id("archive"),
                user_id=row.user_id,
                folder_id=row.id,
                name=f"{row.name} (files)",
                embedding=row.embedding,
                metadata_={},
                version=0,
                deletes=0,
            )
        )

    async def get(self, folder_id: str, user_id: str | None, *, scoped: bool) -> FolderData:
        async with self.db.read() as s:
            row = await s.scalar(
                select(Folder).where(Folder.id == folder_id, _visible(user_id, scoped))
            )
        if row is None:
            raise NotFound("folder", folder_id)
        return _folder(row)

    async def page(
        self,
        user_id: str | None,
        *,
        scoped: bool,
        name: str | None = None,
        agent_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
        before: str | None = None,
        desc: bool = False,
    ) -> list[FolderData]:
        async with self.db.read() as s:
            q = select(Folder).where(_visible(user_id, scoped))
            if name:
                q = q.where(Folder.name == name)
            if agent_id:
                q = q.join(FolderAgent, FolderAgent.folder_id == Folder.id).where(
                    FolderAgent.agent_id == agent_id
                )
            key = tuple_(Folder.created_at, Folder.id)
            for cursor_id, is_after in ((after, True), (before, False)):
                if not cursor_id:
                    continue
                cur = await s.get(Folder, cursor_id)
                if cur is None:
                    return []
                mark = tuple_(cur.created_at, cur.id)
                q = q.where(key > mark if is_after != desc else key < mark)
            order = (
                (Folder.created_at.desc(), Folder.id.desc())
                if desc
                else (Folder.created_at, Folder.id)
            )
            return [_folder(r) for r in await s.scalars(q.order_by(*order).limit(limit))]

    async def update(self, folder_id: str, **fields: Any) -> FolderData:
        async with self.db.write() as s:
            row = await s.get(Folder, folder_id)
            if row is None:
                raise NotFound("folder", folder_id)
            for key, value in fields.items():
                if key in ("name", "description", "instructions"):
                    setattr(row, key, value)
                elif key == "metadata":
                    row.metadata_ = value or {}
            row.updated_at = utcnow()
            await s.flush()
            return _folder(row)

    async def delete(self, folder_id: str) -> list[str]:
        """Delete a folder with its files; returns the agents it was attached to."""
        async with self.db.write() as s:
            row = await s.get(Folder, folder_id)
            if row is None:
                raise NotFound("folder", folder_id)
            agents = list(
                await s.scalars(
                    select(FolderAgent.agent_id).where(FolderAgent.folder_id == folder_id)
                )
            )
            for agent_id in agents:
                await self._detach(s, agent_id, folder_id)
            await s.delete(row)  # files, chunks, the archive and open windows cascade
        return agents

    async def archive_id(self, folder_id: str) -> str:
        async with self.db.read() as s:
            found = await s.scalar(select(Archive.id).where(Archive.folder_id == folder_id))
        if found is None:
            raise NotFound("folder", folder_id)
        return str(found)

    async def agent_folders(self, agent_id: str) -> list[FolderData]:
        return await self.page(None, scoped=False, agent_id=agent_id, limit=1000)

    async def agent_ids(self, folder_id: str) -> list[str]:
        async with self.db.read() as s:
            q = select(FolderAgent.agent_id).where(FolderAgent.folder_id == folder_id)
            return list(await s.scalars(q))

    async def set_attached(self, agent_id: str, folder_id: str, attached: bool) -> None:
        """Attach (the agent gets the file tools and the folder's newest files open, as in
        Letta) or detach (its open files of the folder close; the file tools go with the
        last folder)."""
        async with self.db.write() as s:
            agent = await s.get(Agent, agent_id, with_for_update=True)
            if agent is None:
                raise NotFound("agent", agent_id)
            if await s.get(Folder, folder_id) is None:
                raise NotFound("folder", folder_id)
            link = await s.get(FolderAgent, (folder_id, agent_id))
            if attached and link is None:
                s.add(FolderAgent(folder_id=folder_id, agent_id=agent_id))
                names = list(agent.tool_names) + [
                    t for t in FILE_TOOLS if t not in agent.tool_names
                ]
                agent.tool_names = names
                agent.updated_at = utcnow()
                await s.flush()
                await open_whole(s, agent, folder_id=folder_id)
            elif not attached and link is not None:
                await self._detach(s, agent_id, folder_id)

    @staticmethod
    async def _detach(s: AsyncSession, agent_id: str, folder_id: str) -> None:
        await s.execute(
            delete(FolderAgent).where(
                FolderAgent.folder_id == folder_id, FolderAgent.agent_id == agent_id
            )
        )
        files = select(FileRecord.id).where(FileRecord.folder_id == folder_id)
        await s.execute(delete(Block).where(Block.agent_id == agent_id, Block.file_id.in_(files)))
        left = await s.scalar(select(FolderAgent.folder_id).where(FolderAgent.agent_id == agent_id))
        agent = await s.get(Agent, agent_id)
        if agent is not None:
            if left is None:
                agent.tool_names = [n for n in agent.tool_names if n not in FILE_TOOLS]
            agent.updated_at = utcnow()


def unique_name(name: str, taken: Collection[str]) -> str:
    """`name`, or `stem_(n).ext` with the first n not taken."""
    if name not in taken:
        return name
    path = PurePosixPath(name)
    n = 1
    while f"{path.stem}_({n}){path.suffix}" in taken:
        n += 1
    return f"{path.stem}_({n}){path.suffix}"


class FileStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self, folder: FolderData, name: str, file_type: str, size: int, original: str | None = None
    ) -> FileData:
        """A new file record; `original`: the name it was uploaded under, when `name` is the
        unique name it got in the folder."""
        now = utcnow()
        row = FileRecord(
            id=new_id("file"),
            folder_id=folder.id,
            user_id=folder.user_id,
            file_name=name,
            original_file_name=original or name,
            file_type=file_type,
            file_size=size,
            status="pending",
            created_at=now,
            updated_at=now,
        )
        async with self.db.write() as s:
            s.add(row)
        return FileData.model_validate(row)

    async def names(self, folder_id: str) -> dict[str, str]:
        async with self.db.read() as s:
            q = select(FileRecord.file_name, FileRecord.id).where(FileRecord.folder_id == folder_id)
            return {str(n): str(i) for n, i in (await s.execute(q)).all()}

    async def by_original(self, folder_id: str, original: str) -> str | None:
        """The id of the folder's first file uploaded under the name `original`."""
        async with self.db.read() as s:
            q = (
                select(FileRecord.id)
                .where(FileRecord.folder_id == folder_id)
                .where(FileRecord.original_file_name == original)
                .order_by(FileRecord.created_at, FileRecord.id)
            )
            found = await s.scalar(q.limit(1))
        return None if found is None else str(found)

    async def set(self, file_id: str, **fields: Any) -> None:
        async with self.db.write() as s:
            await s.execute(
                update(FileRecord)
                .where(FileRecord.id == file_id)
                .values(updated_at=utcnow(), **fields)
            )

    async def get(self, file_id: str, folder_id: str | None = None) -> FileData:
        async with self.db.read() as s:
            row = await s.get(FileRecord, file_id)
        if row is None or (folder_id is not None and row.folder_id != folder_id):
            raise NotFound("file", file_id)
        return FileData.model_validate(row)

    async def page(
        self, folder_id: str, *, limit: int = 100, after: str | None = None, desc: bool = False
    ) -> list[FileData]:
        async with self.db.read() as s:
            q = select(FileRecord).where(FileRecord.folder_id == folder_id)
            key = tuple_(FileRecord.created_at, FileRecord.id)
            if after:
                cur = await s.get(FileRecord, after)
                if cur is None:
                    return []
                mark = tuple_(cur.created_at, cur.id)
                q = q.where(key < mark if desc else key > mark)
            order = (
                (FileRecord.created_at.desc(), FileRecord.id.desc())
                if desc
                else (FileRecord.created_at, FileRecord.id)
            )
            return [
                FileData.model_validate(r) for r in await s.scalars(q.order_by(*order).limit(limit))
            ]

    async def of_agent(self, agent_id: str) -> list[FileData]:
        """The files of the folders attached to the agent (content included)."""
        async with self.db.read() as s:
            q = (
                select(FileRecord)
                .join(FolderAgent, FolderAgent.folder_id == FileRecord.folder_id)
                .where(FolderAgent.agent_id == agent_id)
                .order_by(FileRecord.created_at, FileRecord.id)
            )
            return [FileData.model_validate(r) for r in await s.scalars(q)]

    async def delete(self, file_id: str, folder_id: str) -> list[str]:
        """Delete a file, its chunks and its open windows; returns the agents whose context
        showed it."""
        async with self.db.write() as s:
            row = await s.get(FileRecord, file_id)
            if row is None or row.folder_id != folder_id:
                raise NotFound("file", file_id)
            agents = list(await s.scalars(select(Block.agent_id).where(Block.file_id == file_id)))
            archive = await s.scalar(select(Archive.id).where(Archive.folder_id == folder_id))
            await s.delete(row)  # chunks (passages) and open windows (blocks) cascade
            if archive is not None:
                await bump(s, str(archive), deleted=True)
        return [a for a in agents if a]
