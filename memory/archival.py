"""Archival memory: passages of archives, cosine search over cached per-archive matrices.

Every agent has its own archive (`default_archive_id`) and sees every archive attached to it
(memory/orm/sources.py). A search reads the archives' versions (one query: an owned archive's
version is its agent's `archival_version`, a shared one's its own), brings each cached index
up to date (new rows incrementally by `seq`, a full reload only after a delete), and merges
the per-archive top-k. Caller-scoped passages (`identity_id`) are found only by that caller.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Select, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.embeddings import Embedder
from memory.ids import default_archive_id, new_id, utcnow
from memory.models import NotFound, PassageData
from memory.orm import Agent, Archive, ArchiveAgent, Passage
from memory.vector_index import IndexHit, VectorIndex

EmbedderFor = Callable[[str], Embedder]
_SEQ_MARGIN = 256


@dataclass(frozen=True, slots=True)
class ArchiveState:
    id: str
    handle: str
    version: int
    deletes: int


@dataclass(slots=True)
class _Cached:
    index: VectorIndex
    handle: str
    version: int = 0
    deletes: int = 0
    max_seq: int = 0
    rows: dict[str, PassageData] = field(default_factory=dict)


@dataclass(slots=True)
class SearchFilter:
    tags: list[str] | None = None
    match_all_tags: bool = False
    start: datetime | None = None
    end: datetime | None = None
    identity_id: str | None = None  # the caller: their own passages too


def state_query() -> Select:
    return select(
        Archive.id,
        func.coalesce(Agent.embedding, Archive.embedding),
        func.coalesce(Agent.archival_version, Archive.version),
        func.coalesce(Agent.archival_deletes, Archive.deletes),
    ).outerjoin(Agent, Agent.id == Archive.agent_id)


async def bump(s: AsyncSession, archive_id: str, *, deleted: bool = False) -> None:
    """A change to an archive's passages: cached indexes reload (incrementally unless
    `deleted`). An agent's own archive is versioned by the agent's row."""
    inc = 1 if deleted else 0
    await s.execute(
        update(Archive)
        .where(Archive.id == archive_id)
        .values(version=Archive.version + 1, deletes=Archive.deletes + inc)
    )
    owner = select(Archive.agent_id).where(Archive.id == archive_id).scalar_subquery()
    await s.execute(
        update(Agent)
        .where(Agent.id == owner)
        .values(
            archival_version=Agent.archival_version + 1,
            archival_deletes=Agent.archival_deletes + inc,
            updated_at=Agent.updated_at,
        )
    )


class ArchivalStore:
    def __init__(self, db: Database, embedder_for: EmbedderFor, max_archives: int = 256) -> None:
        self.db = db
        self.embedder_for = embedder_for
        self.max_archives = max_archives
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, archive_id: str) -> asyncio.Lock:
        """Held while the archive's cached index grows or is scanned off the event loop."""
        lock = self._locks.get(archive_id)
        if lock is None:
            lock = self._locks[archive_id] = asyncio.Lock()
        return lock

    async def _agent_handle(self, agent_id: str) -> str:
        async with self.db.read() as s:
            handle = await s.scalar(select(Agent.embedding).where(Agent.id == agent_id))
        if handle is None:
            raise NotFound("agent", agent_id)
        return str(handle)

    async def agent_archives(self, agent_id: str) -> list[ArchiveState]:
        """The archives `agent_id` searches: its own and those attached to it."""
        attached = select(ArchiveAgent.archive_id).where(ArchiveAgent.agent_id == agent_id)
        q = state_query().where(or_(Archive.agent_id == agent_id, Archive.id.in_(attached)))
        states = await self.states(q)
        if not states:
            raise NotFound("agent", agent_id)
        return states

    async def states(self, q: Select) -> list[ArchiveState]:
        async with self.db.read() as s:
            rows = (await s.execute(q.order_by(Archive.created_at, Archive.id))).all()
        return [ArchiveState(str(r[0]), str(r[1]), int(r[2]), int(r[3])) for r in rows]

    async def archive_states(self, archive_ids: Sequence[str]) -> list[ArchiveState]:
        return await self.states(state_query().where(Archive.id.in_(list(archive_ids))))

    async def insert(
        self,
        agent_id: str,
        texts: Sequence[str],
        tags: Sequence[str] | None = None,
        *,
        created_at: datetime | None = None,
        source_event_id: str | None = None,
        identity_id: str | None = None,
    ) -> list[PassageData]:
        rows = await self.prepare(
            agent_id,
            texts,
            tags,
            created_at=created_at,
            source_event_id=source_event_id,
            identity_id=identity_id,
        )
        async with self.db.write() as s:
            await self.add_prepared(s, agent_id, rows)
        return [PassageData.model_validate(r) for r in rows]

    async def prepare(
        self,
        agent_id: str,
        texts: Sequence[str],
        tags: Sequence[str] | None = None,
        *,
        created_at: datetime | None = None,
        source_event_id: str | None = None,
        identity_id: str | None = None,
    ) -> list[Passage]:
        """Embed passages for the agent's own archive (outside any transaction);
        `add_prepared` stores them. With `identity_id` a passage is that caller's own."""
        handle = await self._agent_handle(agent_id)
        rows = await self.embed_rows(handle, default_archive_id(agent_id), texts, tags, created_at)
        for r in rows:
            r.agent_id, r.source_event_id, r.identity_id = agent_id, source_event_id, identity_id
        return rows

    async def embed_rows(
        self,
        handle: str,
        archive_id: str,
        texts: Sequence[str],
        tags: Sequence[str] | None = None,
        created_at: datetime | None = None,
        *,
        embedder: Embedder | None = None,
    ) -> list[Passage]:
        if not texts:
            return []
        vectors = await (embedder or self.embedder_for(handle)).embed(list(texts))
        return self.rows_from(
            handle, archive_id, texts, vectors, [list(tags or [])] * len(texts), created_at
        )

    @staticmethod
    def rows_from(
        handle: str,
        archive_id: str,
        texts: Sequence[str],
        vectors: np.ndarray,
        tags: Sequence[list[str]],
        created_at: datetime | None = None,
        *,
        file_id: str | None = None,
    ) -> list[Passage]:
        return [
            Passage(
                id=new_id("passage"),
                archive_id=archive_id,
                file_id=file_id,
                text=text,
                tags=list(tags[i]),
                embedding=vectors[i].astype(np.float32).tobytes(),
                embedding_handle=handle,
                created_at=created_at or utcnow(),
            )
            for i, text in enumerate(texts)
        ]

    @staticmethod
    async def add_prepared(s: AsyncSession, agent_id: str, rows: Sequence[Passage]) -> None:
        """Store prepared passages of the agent's own archive inside the caller's transaction."""
        if not rows:
            return
        s.add_all(rows)
        await s.execute(
            update(Agent)
            .where(Agent.id == agent_id)
            .values(archival_version=Agent.archival_version + 1, updated_at=Agent.updated_at)
        )

    async def add_to_archive(self, archive_id: str, rows: Sequence[Passage]) -> None:
        async with self.db.write() as s:
            s.add_all(rows)
            await bump(s, archive_id)

    async def search(
        self,
        agent_id: str,
        query: str,
        top_k: int = 5,
        *,
        tags: Sequence[str] | None = None,
        match_all_tags: bool = False,
        start: datetime | None = None,
        end: datetime | None = None,
        identity_id: str | None = None,
    ) -> list[PassageData]:
        """Every archive the agent sees: agent-wide passages and, with `identity_id`, that
        caller's own."""
        flt = SearchFilter(list(tags) if tags else None, match_all_tags, start, end, identity_id)
        return await self.search_archives(await self.agent_archives(agent_id), query, top_k, flt)

    async def search_archives(
        self, states: Sequence[ArchiveState], query: str, top_k: int, flt: SearchFilter
    ) -> list[PassageData]:
        if not states or top_k <= 0:
            return []
        handles = sorted({st.handle for st in states})
        got = await asyncio.gather(
            *(self.embedder_for(h).embed([query]) for h in handles),
            *(self._index(st) for st in states),
        )
        qvecs = {h: got[i][0] for i, h in enumerate(handles)}
        caches: list[_Cached] = list(got[len(handles) :])

        def scan() -> list[list[IndexHit]]:
            return [
                c.index.search(
                    qvecs[c.handle],
                    top_k,
                    tags=flt.tags,
                    match_all_tags=flt.match_all_tags,
                    start=flt.start.timestamp() if flt.start else None,
                    end=flt.end.timestamp() if flt.end else None,
                    owner=flt.identity_id,
                )
                for c in caches
            ]

        if sum(len(c.index) for c in caches) <= caches[0].index.exact_below:
            found = scan()  # well under a millisecond
        else:  # milliseconds (~5 at 100k rows): off the event loop; loads wait for it
            async with AsyncExitStack() as stack:
                for archive_id in sorted({st.id for st in states}):
                    await stack.enter_async_context(self._lock(archive_id))
                found = await asyncio.to_thread(scan)
        merged = [
            (h.score, c.rows[h.passage_id])
            for c, hits in zip(caches, found, strict=True)
            for h in hits
        ]
        merged.sort(key=lambda x: -x[0])  # stable: ties keep archive, then index order
        return [p.model_copy(update={"score": score}) for score, p in merged[:top_k]]

    async def _index(self, st: ArchiveState) -> _Cached:
        cached = self._cache.get(st.id)
        if cached and cached.version == st.version and cached.handle == st.handle:
            self._cache.move_to_end(st.id)
            return cached
        async with self._lock(st.id):
            cached = self._cache.get(st.id)
            if cached is None or cached.deletes != st.deletes or cached.handle != st.handle:
                dim = self.embedder_for(st.handle).dim
                cached = _Cached(index=VectorIndex(dim), handle=st.handle, deletes=st.deletes)
            await self._load_new(st.id, cached)
            cached.version = st.version
            self._cache[st.id] = cached
            self._cache.move_to_end(st.id)
            while len(self._cache) > self.max_archives:
                self._cache.popitem(last=False)
            return cached

    async def _load_new(self, archive_id: str, cached: _Cached) -> None:
        async with self.db.read() as s:
            rows = list(
                await s.scalars(
                    select(Passage)
                    .where(
                        Passage.archive_id == archive_id,
                        # a margin: on PostgreSQL a lower seq can commit after a higher one
                        Passage.seq > cached.max_seq - _SEQ_MARGIN,
                        Passage.embedding_handle == cached.handle,
                    )
                    .order_by(Passage.seq)
                )
            )
        rows = [r for r in rows if r.id not in cached.rows]
        if not rows:
            return
        vectors = np.frombuffer(b"".join(r.embedding for r in rows), dtype=np.float32)
        cached.index.add(
            [r.id for r in rows],
            vectors.reshape(len(rows), -1),
            [r.created_at.timestamp() for r in rows],
            [list(r.tags or []) for r in rows],
            [r.identity_id for r in rows],
        )
        for r in rows:
            cached.rows[r.id] = PassageData.model_validate(r)
        cached.max_seq = max(cached.max_seq, rows[-1].seq)

    async def page(
        self,
        agent_id: str,
        *,
        limit: int = 100,
        after: str | None = None,
        ascending: bool = True,
        search: str | None = None,
    ) -> list[PassageData]:
        await self._agent_handle(agent_id)
        async with self.db.read() as s:
            q = select(Passage).where(Passage.agent_id == agent_id)
            if after:
                seq = await s.scalar(  # only this agent's passages are cursors
                    select(Passage.seq).where(Passage.id == after, Passage.agent_id == agent_id)
                )
                if seq is None:
                    raise NotFound("passage", after)
                q = q.where(Passage.seq > seq if ascending else Passage.seq < seq)
            if search:
                q = q.where(Passage.text.icontains(search, autoescape=True))
            q = q.order_by(Passage.seq if ascending else Passage.seq.desc()).limit(limit)
            return [PassageData.model_validate(r) for r in await s.scalars(q)]

    async def delete(self, agent_id: str, passage_id: str) -> None:
        await self.delete_where(
            default_archive_id(agent_id), passage_id, Passage.agent_id == agent_id
        )

    async def delete_where(self, archive_id: str, passage_id: str, *also: Any) -> None:
        async with self.db.write() as s:
            res = await s.execute(
                delete(Passage).where(
                    Passage.id == passage_id, Passage.archive_id == archive_id, *also
                )
            )
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("passage", passage_id)
            await bump(s, archive_id, deleted=True)
        self._cache.pop(archive_id, None)

    def forget(self, archive_id: str) -> None:
        self._cache.pop(archive_id, None)

    async def exists(self, agent_id: str, source_event_id: str, text: str) -> bool:
        async with self.db.read() as s:
            q = select(Passage.id).where(
                Passage.agent_id == agent_id,
                Passage.source_event_id == source_event_id,
                Passage.text == text,
            )
            return await s.scalar(q.limit(1)) is not None

    async def count(self, agent_id: str, source_event_id: str | None = None) -> int:
        async with self.db.read() as s:
            q = select(func.count()).select_from(Passage).where(Passage.agent_id == agent_id)
            if source_event_id is not None:
                q = q.where(Passage.source_event_id == source_event_id)
            return int(await s.scalar(q) or 0)
