"""Archival memory: passages with embeddings; cosine search over a cached per-agent matrix.

The cache is checked against `agents.archival_version` (one primary-key read) before each
search, so passages written by another process (a sleeptime worker, another gateway) are
picked up: new rows incrementally by `seq`, a full reload only after a foreign delete.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.embeddings import Embedder
from memory.models import NotFound, PassageData
from memory.orm import Agent, Passage, new_id, utcnow
from memory.vector_index import VectorIndex

EmbedderFor = Callable[[str], Embedder]
_SEQ_MARGIN = 256


@dataclass(slots=True)
class _Cached:
    index: VectorIndex
    handle: str
    version: int = 0
    deletes: int = 0
    max_seq: int = 0
    rows: dict[str, PassageData] = field(default_factory=dict)


class ArchivalStore:
    def __init__(self, db: Database, embedder_for: EmbedderFor, max_agents: int = 256) -> None:
        self.db = db
        self.embedder_for = embedder_for
        self.max_agents = max_agents
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, agent_id: str) -> asyncio.Lock:
        """Held while the agent's cached index grows or is scanned off the event loop."""
        lock = self._locks.get(agent_id)
        if lock is None:
            lock = self._locks[agent_id] = asyncio.Lock()
        return lock

    async def _agent_state(self, agent_id: str) -> tuple[str, int, int]:
        async with self.db.read() as s:
            row = (
                await s.execute(
                    select(Agent.embedding, Agent.archival_version, Agent.archival_deletes).where(
                        Agent.id == agent_id
                    )
                )
            ).first()
        if row is None:
            raise NotFound("agent", agent_id)
        return str(row[0]), int(row[1]), int(row[2])

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
        """Embed passages (outside any transaction); `add_prepared` stores them. With
        `identity_id` a passage is that caller's own (only their searches find it)."""
        handle, _, _ = await self._agent_state(agent_id)
        if not texts:
            return []
        vectors = await self.embedder_for(handle).embed(list(texts))
        return [
            Passage(
                id=new_id("passage"),
                agent_id=agent_id,
                text=text,
                tags=list(tags or []),
                embedding=vectors[i].astype(np.float32).tobytes(),
                embedding_handle=handle,
                source_event_id=source_event_id,
                identity_id=identity_id,
                created_at=created_at or utcnow(),
            )
            for i, text in enumerate(texts)
        ]

    @staticmethod
    async def add_prepared(s: AsyncSession, agent_id: str, rows: Sequence[Passage]) -> None:
        """Store prepared passages inside the caller's transaction."""
        if not rows:
            return
        s.add_all(rows)
        await s.execute(
            update(Agent)
            .where(Agent.id == agent_id)
            .values(archival_version=Agent.archival_version + 1, updated_at=Agent.updated_at)
        )

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
        """Agent-wide passages and, with `identity_id`, that caller's own."""
        cached, qvec = await asyncio.gather(
            self._index(agent_id), self._embed_query(agent_id, query)
        )
        scan = functools.partial(
            cached.index.search,
            qvec,
            top_k,
            tags=list(tags) if tags else None,
            match_all_tags=match_all_tags,
            start=start.timestamp() if start else None,
            end=end.timestamp() if end else None,
            owner=identity_id,
        )
        if len(cached.index) <= cached.index.exact_below:
            hits = scan()  # well under a millisecond
        else:  # milliseconds (~5 at 100k rows): off the event loop; loads wait for it
            async with self._lock(agent_id):
                hits = await asyncio.to_thread(scan)
        return [cached.rows[h.passage_id].model_copy(update={"score": h.score}) for h in hits]

    async def _embed_query(self, agent_id: str, query: str) -> np.ndarray:
        cached = self._cache.get(agent_id)
        handle = cached.handle if cached else (await self._agent_state(agent_id))[0]
        return (await self.embedder_for(handle).embed([query]))[0]

    async def _index(self, agent_id: str) -> _Cached:
        handle, version, deletes = await self._agent_state(agent_id)
        cached = self._cache.get(agent_id)
        if cached and cached.version == version and cached.handle == handle:
            self._cache.move_to_end(agent_id)
            return cached
        async with self._lock(agent_id):
            cached = self._cache.get(agent_id)
            if cached is None or cached.deletes != deletes or cached.handle != handle:
                dim = self.embedder_for(handle).dim
                cached = _Cached(index=VectorIndex(dim), handle=handle, deletes=deletes)
            await self._load_new(agent_id, cached)
            cached.version = version
            self._cache[agent_id] = cached
            self._cache.move_to_end(agent_id)
            while len(self._cache) > self.max_agents:
                self._cache.popitem(last=False)
            return cached

    async def _load_new(self, agent_id: str, cached: _Cached) -> None:
        async with self.db.read() as s:
            rows = list(
                await s.scalars(
                    select(Passage)
                    .where(
                        Passage.agent_id == agent_id,
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
        await self._agent_state(agent_id)
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
        async with self.db.write() as s:
            res = await s.execute(
                delete(Passage).where(Passage.id == passage_id, Passage.agent_id == agent_id)
            )
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("passage", passage_id)
            await s.execute(
                update(Agent)
                .where(Agent.id == agent_id)
                .values(
                    archival_version=Agent.archival_version + 1,
                    archival_deletes=Agent.archival_deletes + 1,
                    updated_at=Agent.updated_at,
                )
            )
        self._cache.pop(agent_id, None)

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
