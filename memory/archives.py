"""Archives: CRUD, attaching to agents, passages of shared archives (search: archival.py).

Ownership as for tools: an archive belongs to a user (or to the server, user_id None); another
user's archive is 'not found'. An agent's own archive is listed too (Letta lists it), but it
cannot be deleted or detached: it goes with its agent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import or_, select, tuple_

from memory.archival import ArchivalStore, ArchiveState, SearchFilter, state_query
from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import Conflict, NotFound, PassageData
from memory.orm import Agent, Archive, ArchiveAgent


class ArchiveData(BaseModel):
    model_config = {"from_attributes": True}
    id: str
    user_id: str | None = None
    agent_id: str | None = None  # set: an agent's own archive
    name: str
    description: str | None = None
    embedding: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    updated_at: datetime


def _data(row: Archive) -> ArchiveData:
    d = {c.key: getattr(row, c.key) for c in Archive.__mapper__.column_attrs}
    d["metadata"] = d.pop("metadata_") or {}
    return ArchiveData.model_validate(d)


def _visible(user_id: str | None, scoped: bool) -> Any:
    if not scoped:
        return Archive.folder_id.is_(None)
    owner = Archive.user_id == user_id if user_id else Archive.user_id.is_(None)
    return owner & Archive.folder_id.is_(None)


class ArchiveStore:
    def __init__(self, db: Database, archival: ArchivalStore) -> None:
        self.db = db
        self.archival = archival

    async def create(
        self,
        user_id: str | None,
        name: str,
        embedding: str,
        description: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ArchiveData:
        row = Archive(
            id=new_id("archive"),
            user_id=user_id,
            name=name,
            description=description,
            embedding=embedding,
            metadata_=metadata or {},
            version=0,
            deletes=0,
            created_at=utcnow(),
            updated_at=utcnow(),
        )
        async with self.db.write() as s:
            s.add(row)
        return _data(row)

    async def get(self, archive_id: str, user_id: str | None, *, scoped: bool) -> ArchiveData:
        async with self.db.read() as s:
            row = await s.scalar(
                select(Archive).where(Archive.id == archive_id, _visible(user_id, scoped))
            )
        if row is None:
            raise NotFound("archive", archive_id)
        return _data(row)

    async def page(
        self,
        user_id: str | None,
        *,
        scoped: bool,
        agent_id: str | None = None,
        name: str | None = None,
        limit: int = 50,
        after: str | None = None,
        before: str | None = None,
        desc: bool = False,
    ) -> list[ArchiveData]:
        async with self.db.read() as s:
            q = select(Archive).where(_visible(user_id, scoped))
            if agent_id:
                attached = select(ArchiveAgent.archive_id).where(ArchiveAgent.agent_id == agent_id)
                q = q.where(or_(Archive.agent_id == agent_id, Archive.id.in_(attached)))
            if name:
                q = q.where(Archive.name == name)
            key = tuple_(Archive.created_at, Archive.id)
            for cursor_id, is_after in ((after, True), (before, False)):
                if not cursor_id:
                    continue
                cur = await s.scalar(
                    select(Archive).where(Archive.id == cursor_id, _visible(user_id, scoped))
                )
                if cur is None:
                    return []
                mark = tuple_(cur.created_at, cur.id)
                q = q.where(key > mark if is_after != desc else key < mark)
            order = (
                (Archive.created_at.desc(), Archive.id.desc())
                if desc
                else (Archive.created_at, Archive.id)
            )
            rows = await s.scalars(q.order_by(*order).limit(limit))
            return [_data(r) for r in rows]

    async def update(self, archive_id: str, **fields: Any) -> ArchiveData:
        async with self.db.write() as s:
            row = await s.get(Archive, archive_id)
            if row is None:
                raise NotFound("archive", archive_id)
            for key in ("name", "description"):
                if key in fields:
                    setattr(row, key, fields[key])
            row.updated_at = utcnow()
            await s.flush()
            return _data(row)

    async def delete(self, archive_id: str) -> None:
        async with self.db.write() as s:
            row = await s.get(Archive, archive_id)
            if row is None:
                raise NotFound("archive", archive_id)
            if row.agent_id is not None:
                raise Conflict("an agent's own archive goes with its agent: delete the agent")
            await s.delete(row)  # its passages and attachments cascade
        self.archival.forget(archive_id)

    async def set_attached(self, agent_id: str, archive_id: str, attached: bool) -> None:
        async with self.db.write() as s:
            row = await s.get(Archive, archive_id)
            if row is None or row.folder_id is not None:
                raise NotFound("archive", archive_id)
            if row.agent_id == agent_id:
                if attached:
                    return  # always attached
                raise Conflict("an agent's own archive cannot be detached from it")
            link = await s.get(ArchiveAgent, (archive_id, agent_id))
            if attached and link is None:
                s.add(ArchiveAgent(archive_id=archive_id, agent_id=agent_id))
            elif not attached and link is not None:
                await s.delete(link)
            agent = await s.get(Agent, agent_id)
            if agent is not None:  # a search's version check sees the change
                agent.archival_version += 1
                agent.updated_at = utcnow()

    async def add_passages(
        self, archive: ArchiveData, items: list[tuple[str, list[str], datetime | None]]
    ) -> list[PassageData]:
        """Embed and store passages in one transaction (all or none)."""
        rows = []
        for text, tags, created_at in items:
            rows += await self.archival.embed_rows(
                archive.embedding, archive.id, [text], tags, created_at
            )
        if archive.agent_id is not None:
            for r in rows:
                r.agent_id = archive.agent_id
        await self.archival.add_to_archive(archive.id, rows)
        return [PassageData.model_validate(r) for r in rows]

    async def delete_passage(self, archive_id: str, passage_id: str) -> None:
        await self.archival.delete_where(archive_id, passage_id)

    async def search(
        self,
        query: str,
        limit: int,
        flt: SearchFilter,
        *,
        user_id: str | None,
        scoped: bool,
        agent_id: str | None = None,
        archive_id: str | None = None,
    ) -> list[PassageData]:
        """Letta's /v1/passages/search: the agent's archives, one archive, or all yours."""
        states: list[ArchiveState]
        if agent_id:
            states = await self.archival.agent_archives(agent_id)
        elif archive_id:
            await self.get(archive_id, user_id, scoped=scoped)
            states = await self.archival.archive_states([archive_id])
        else:
            states = await self.archival.states(state_query().where(_visible(user_id, scoped)))
        return await self.archival.search_archives(states, query, limit, flt)
