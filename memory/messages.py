"""Recall memory: every message of every turn, ordered by `seq`, searchable by text and time."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database, after_commit
from memory.models import MessageData, NotFound
from memory.orm import Agent, Message, utcnow


def to_row(m: MessageData) -> Message:
    data = m.model_dump(exclude={"seq"})
    data["tool_calls"] = [tc.model_dump() for tc in m.tool_calls]
    if data["created_at"] is None:
        data["created_at"] = utcnow()
    return Message(**data)


class ContextCache:
    """Per agent, the in-context messages as of `agents.messages_version`. Every change to an
    agent's messages bumps that version in the same transaction, so a cached window is reused
    only while nobody (this process, another gateway, a worker) has written since."""

    def __init__(self, max_agents: int = 512) -> None:
        self.max_agents = max_agents
        self._windows: OrderedDict[str, tuple[int, list[MessageData]]] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, agent_id: str, version: int) -> list[MessageData] | None:
        hit = self._windows.get(agent_id)
        if hit is None or hit[0] != version:
            self.misses += 1
            return None
        self.hits += 1
        self._windows.move_to_end(agent_id)
        return list(hit[1])

    def put(self, agent_id: str, version: int, messages: list[MessageData]) -> None:
        self._windows[agent_id] = (version, messages)
        self._windows.move_to_end(agent_id)
        while len(self._windows) > self.max_agents:
            self._windows.popitem(last=False)

    def appended(self, agent_id: str, old: int, new: int, messages: list[MessageData]) -> None:
        """Our own append moved the version old -> new: extend the window if it was current."""
        hit = self._windows.get(agent_id)
        if hit is not None and hit[0] == old:
            self._windows[agent_id] = (new, hit[1] + messages)
        else:
            self._windows.pop(agent_id, None)

    def drop(self, agent_id: str) -> None:
        self._windows.pop(agent_id, None)


async def bump_version(session: AsyncSession, agent_id: str) -> int:
    """Increment `agents.messages_version` in the caller's transaction; returns the new value
    (-1 when the agent does not exist). `updated_at` is left as it is."""
    new = await session.scalar(
        update(Agent)
        .where(Agent.id == agent_id)
        .values(messages_version=Agent.messages_version + 1, updated_at=Agent.updated_at)
        .returning(Agent.messages_version)
    )
    return -1 if new is None else int(new)


class MessageStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.cache = ContextCache()

    async def append(self, session: AsyncSession, messages: Sequence[MessageData]) -> list[int]:
        """Insert inside the caller's transaction; returns the assigned seqs."""
        rows = [to_row(m) for m in messages]
        session.add_all(rows)
        await session.flush()
        for m, r in zip(messages, rows, strict=True):
            m.seq, m.created_at = r.seq, r.created_at
        for agent_id in dict.fromkeys(m.agent_id for m in messages):
            new = await bump_version(session, agent_id)
            mine = [m.model_copy() for m in messages if m.agent_id == agent_id and m.in_context]
            after_commit(
                session,
                lambda a=agent_id, n=new, ms=mine: self.cache.appended(a, n - 1, n, ms),
            )
        return [r.seq for r in rows]

    async def changed(self, session: AsyncSession, agent_id: str) -> None:
        """Messages of `agent_id` were updated in this transaction (not appended)."""
        await bump_version(session, agent_id)
        after_commit(session, lambda: self.cache.drop(agent_id))

    async def add(self, messages: Sequence[MessageData]) -> None:
        async with self.db.write() as s:
            await self.append(s, messages)

    async def get(self, message_id: str) -> MessageData:
        async with self.db.read() as s:
            row = await s.scalar(select(Message).where(Message.id == message_id))
            if row is None:
                raise NotFound("message", message_id)
            return MessageData.model_validate(row)

    async def in_context(self, agent_id: str, version: int | None = None) -> list[MessageData]:
        """The agent's context window in order. With `version` (the agent's messages_version
        as just read), a cached window of that version is returned without a query."""
        if version is not None and (hit := self.cache.get(agent_id, version)) is not None:
            return hit
        async with self.db.read() as s:
            if version is None:
                version = await s.scalar(select(Agent.messages_version).where(Agent.id == agent_id))
            rows = await s.scalars(
                select(Message)
                .where(Message.agent_id == agent_id, Message.in_context.is_(True))
                .order_by(Message.seq)
            )
            out = [MessageData.model_validate(r) for r in rows]
        if version is not None:
            self.cache.put(agent_id, version, [m.model_copy() for m in out])
        return out

    async def evict(self, session: AsyncSession, agent_id: str, upto_seq: int) -> int:
        """Take messages up to `upto_seq` out of the context window (they stay in recall)."""
        res = await session.execute(
            update(Message)
            .where(
                Message.agent_id == agent_id, Message.seq <= upto_seq, Message.in_context.is_(True)
            )
            .values(in_context=False)
        )
        await self.changed(session, agent_id)
        return int(res.rowcount)  # type: ignore[attr-defined]

    async def page(
        self,
        agent_id: str,
        *,
        limit: int = 100,
        after: str | None = None,
        before: str | None = None,
        order: Literal["asc", "desc"] = "desc",
        conversation_id: str | None = None,
    ) -> list[MessageData]:
        """A page in `order`. `after`/`before` are message ids and follow the sort order
        (with "desc", `after` means older); a `before`-only page is the one closest to it."""
        async with self.db.read() as s:
            q = select(Message).where(Message.agent_id == agent_id)
            if conversation_id is not None:
                q = q.where(Message.conversation_id == conversation_id)
            newer_first = order == "desc"
            for cursor, is_after in ((after, True), (before, False)):
                if cursor is None:
                    continue
                seq = await s.scalar(
                    select(Message.seq).where(Message.id == cursor, Message.agent_id == agent_id)
                )
                if seq is None:
                    raise NotFound("message", cursor)
                later = is_after != newer_first  # "after" in asc order means a higher seq
                q = q.where(Message.seq > seq if later else Message.seq < seq)
            backwards = before is not None and after is None
            desc = newer_first != backwards
            q = q.order_by(Message.seq.desc() if desc else Message.seq.asc()).limit(limit)
            rows = [MessageData.model_validate(r) for r in await s.scalars(q)]
            return rows[::-1] if backwards else rows

    async def search(
        self,
        agent_id: str,
        query: str | None,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 5,
        roles: Sequence[str] = ("user", "assistant"),
        exclude_turn: str | None = None,
    ) -> list[MessageData]:
        """Case-insensitive text search (every word must appear), newest first."""
        async with self.db.read() as s:
            q = select(Message).where(
                Message.agent_id == agent_id, Message.role.in_(roles), Message.kind == "message"
            )
            for word in (query or "").split():
                q = q.where(func.lower(Message.content).contains(word.lower(), autoescape=True))
            if exclude_turn is not None:
                q = q.where(or_(Message.turn_id.is_(None), Message.turn_id != exclude_turn))
            if start is not None:
                q = q.where(Message.created_at >= start)
            if end is not None:
                q = q.where(Message.created_at <= end)
            q = q.where(or_(Message.content != "", Message.role == "user"))
            rows = await s.scalars(q.order_by(Message.seq.desc()).limit(limit))
            return [MessageData.model_validate(r) for r in rows]

    async def update(self, message_id: str, **values: Any) -> None:
        async with self.db.write() as s:
            agent_id = await s.scalar(
                update(Message)
                .where(Message.id == message_id)
                .values(**values)
                .returning(Message.agent_id)
            )
            if agent_id is not None:
                await self.changed(s, agent_id)

    async def truncate(self, session: AsyncSession, message_id: str, heard: str) -> None:
        """Cut an assistant message to what the caller heard (the full text is kept)."""
        agent_id = await session.scalar(
            update(Message)
            .where(Message.id == message_id)
            .values(
                produced=func.coalesce(Message.produced, Message.content),
                content=heard,
                truncated=True,
            )
            .returning(Message.agent_id)
        )
        if agent_id is not None:
            await self.changed(session, agent_id)

    async def count(self, agent_id: str) -> int:
        async with self.db.read() as s:
            return int(
                await s.scalar(select(func.count()).where(Message.agent_id == agent_id)) or 0
            )
