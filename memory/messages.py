"""Recall memory: every message of every turn, ordered by `seq`, searchable by text and time."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, or_, select

from memory.db import Database
from memory.ids import default_conversation_id, utcnow
from memory.models import MessageData, NotFound
from memory.orm import Message
from memory.raw import Codec, Stmt

# every column but seq (the database assigns it); the stored values are what the ORM would store
_INSERT_COLUMNS = [c.name for c in Message.__table__.columns if c.name != "seq"]
_INSERT = "INSERT INTO messages (" + ", ".join(f'"{n}"' for n in _INSERT_COLUMNS) + ") VALUES "
_ROW = "(" + ", ".join("?" * len(_INSERT_COLUMNS)) + ")"
_BUMP = (  # the conversation's context version; updated_at is left as it is
    "UPDATE conversations SET messages_version = messages_version + 1 WHERE id = ? "
    "RETURNING id, messages_version"
)
_SPOKEN = (  # ... and, as new messages came, when the conversation last had one
    "UPDATE conversations SET messages_version = messages_version + 1, last_active_at = ? "
    "WHERE id = ? RETURNING id, messages_version"
)
_MESSAGES = Codec(Message.__table__)  # type: ignore[arg-type]
_WINDOW = (
    f"SELECT {_MESSAGES.columns('m')} FROM messages m "
    "WHERE m.conversation_id = ? AND m.in_context = ? ORDER BY m.seq"
)
_VERSION = "SELECT messages_version FROM conversations WHERE id = ?"
_EVICT = (
    "UPDATE messages SET in_context = ? WHERE conversation_id = ? AND seq <= ? AND in_context = ?"
)
_TRUNCATE = (
    "UPDATE messages SET produced = COALESCE(produced, content), content = ?, truncated = ? "
    "WHERE id = ?"
)


def insert_stmt(messages: Sequence[MessageData]) -> Stmt:
    """One multi-row INSERT; its rows (id, seq) say which seq each message got."""
    params: list[Any] = []
    for m in messages:
        data = m.model_dump(exclude={"seq"})
        params += [data[c] for c in _INSERT_COLUMNS]
    sql = _INSERT + ", ".join([_ROW] * len(messages)) + " RETURNING id, seq"
    return Stmt(sql, params, returns=True)


class ContextCache:
    """Per conversation, the in-context messages as of `conversations.messages_version`. Every
    change to a conversation's messages bumps that version in the same transaction, so a cached
    window is reused only while nobody (this process, another gateway, a worker) has written
    since. (Keys below say agent_id for history; they are conversation ids.)

    The window holds the message objects themselves, those read and those this process
    appended (not copies: the agent loop recognises its own messages in the next turn's
    window by identity, agents.compiled). A stored message is never changed in place: changes
    go to the database and drop the window. `get` returns a new list of the same objects."""

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


class MessageStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.cache = ContextCache()

    async def append(
        self,
        messages: Sequence[MessageData],
        *,
        also: Sequence[Stmt] = (),
        evict_upto: int | None = None,
    ) -> None:
        """Store `messages` (setting their seq and created_at) and bump each conversation's
        messages_version, in one transaction with the statements `also` (e.g. the turn's outbox
        row). With `evict_upto`, the conversations' messages up to that seq leave the context
        window (they stay in recall) in the same transaction: a summary replaces them. A
        message of a deleted conversation fails the whole transaction (foreign key)."""
        for m in messages:
            m.created_at = m.created_at or utcnow()
            m.conversation_id = m.conversation_id or default_conversation_id(m.agent_id)
        agents = list(dict.fromkeys(str(m.conversation_id) for m in messages))
        evict = (
            [Stmt(_EVICT, (False, a, evict_upto, True)) for a in agents]
            if evict_upto is not None
            else []
        )
        stmts = [*also, *evict]
        if messages:
            stmts.append(insert_stmt(messages))
            now = utcnow()
            stmts += [Stmt(_SPOKEN, (now, a), returns=True) for a in agents]
        results = await self.db.batch(stmts, write=True)
        if not messages:
            return
        inserted = len(also) + len(evict)
        seqs = {r["id"]: int(r["seq"]) for r in results[inserted]}
        for m in messages:
            m.seq = seqs[m.id]
        for rows in results[inserted + 1 :]:
            for r in rows:  # the committed version; the cache may extend its window in place
                agent_id, new = r["id"], int(r["messages_version"])
                if evict:
                    self.cache.drop(agent_id)
                    continue
                mine = [m for m in messages if m.conversation_id == agent_id and m.in_context]
                self.cache.appended(agent_id, new - 1, new, mine)

    async def truncate(self, heard: Mapping[str, str], *, also: Sequence[Stmt] = ()) -> None:
        """Cut assistant messages to what the caller heard (message id -> text; the full text
        is kept in `produced`), in one transaction with the statements `also`."""
        stmts = [Stmt(_TRUNCATE, (text, True, message_id)) for message_id, text in heard.items()]
        if heard:
            marks = ", ".join("?" * len(heard))
            bump = (
                "UPDATE conversations SET messages_version = messages_version + 1 WHERE id IN "
                f"(SELECT conversation_id FROM messages WHERE id IN ({marks})) RETURNING id"
            )
            stmts.append(Stmt(bump, list(heard), returns=True))
        results = await self.db.batch([*stmts, *also], write=True)
        for row in results[len(heard)] if heard else []:
            self.cache.drop(row["id"])

    async def get(self, message_id: str) -> MessageData:
        async with self.db.read() as s:
            row = await s.scalar(select(Message).where(Message.id == message_id))
            if row is None:
                raise NotFound("message", message_id)
            return MessageData.model_validate(row)

    async def in_context(
        self, conversation_id: str, version: int | None = None
    ) -> list[MessageData]:
        """The conversation's context window in order. With `version` (its messages_version
        as just read), a cached window of that version is returned without a query."""
        if version is not None and (hit := self.cache.get(conversation_id, version)) is not None:
            return hit
        # straight to the driver, one read transaction (memory.raw): a call's first turn
        # reads its window here (through the ORM ~1 ms more of the event loop per call)
        stmts = [Stmt(_WINDOW, (conversation_id, True), returns=True)]
        if version is None:
            stmts.append(Stmt(_VERSION, (conversation_id,), returns=True))
        results = await self.db.batch(stmts)
        sqlite = self.db.is_sqlite
        rows = sorted(results[0], key=lambda r: int(r["seq"]))  # PostgreSQL returns them unordered
        out = [MessageData.model_validate(_MESSAGES.decode(r, sqlite=sqlite)) for r in rows]
        if version is None and results[1]:
            version = int(results[1][0]["messages_version"])
        if version is not None:
            self.cache.put(conversation_id, version, [m.model_copy() for m in out])
        return out

    async def page(
        self,
        agent_id: str | None,
        *,
        limit: int = 100,
        after: str | None = None,
        before: str | None = None,
        order: Literal["asc", "desc"] = "desc",
        conversation_id: str | None = None,
        agent_ids: Sequence[str] | None = None,
        turn_id: str | None = None,
        step_id: str | None = None,
    ) -> list[MessageData]:
        """A page in `order` of one agent's messages (`agent_id`; None: of the agents
        `agent_ids`, None too: all), optionally of one conversation, run (`turn_id`) or step.
        `after`/`before` are message ids and follow the sort order (with "desc", `after`
        means older); a `before`-only page is the one closest to it."""
        async with self.db.read() as s:
            q = select(Message)
            if agent_id is not None:
                q = q.where(Message.agent_id == agent_id)
            elif agent_ids is not None:
                q = q.where(Message.agent_id.in_(agent_ids))
            for column, value in (
                (Message.conversation_id, conversation_id),
                (Message.turn_id, turn_id),
                (Message.step_id, step_id),
            ):
                if value is not None:
                    q = q.where(column == value)
            newer_first, base = order == "desc", q
            for cursor, is_after in ((after, True), (before, False)):
                if cursor is None:
                    continue
                seq = await s.scalar(
                    base.with_only_columns(Message.seq).where(Message.id == cursor)
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
        identity_id: str | None = None,
    ) -> list[MessageData]:
        """Case-insensitive text search (every word must appear), newest first, among the
        messages of one caller (`identity_id`; None: the messages of no caller): a caller's
        search never sees another caller's words."""
        async with self.db.read() as s:
            q = select(Message).where(
                Message.agent_id == agent_id, Message.role.in_(roles), Message.kind == "message"
            )
            q = q.where(
                Message.identity_id == identity_id
                if identity_id is not None
                else Message.identity_id.is_(None)
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

    async def search_all(
        self,
        agent_ids: Sequence[str] | None,
        query: str,
        *,
        agent_id: str | None = None,
        conversation_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int = 50,
    ) -> list[MessageData]:
        """Full-text search (every word, case-insensitive) of the messages of `agent_ids`
        (None: all agents), newest first: Letta's `POST /v1/messages/search`."""
        async with self.db.read() as s:
            q = select(Message).where(Message.kind.notin_(("note", "system")))
            if agent_ids is not None:
                q = q.where(Message.agent_id.in_(agent_ids))
            if agent_id is not None:
                q = q.where(Message.agent_id == agent_id)
            if conversation_id is not None:
                q = q.where(Message.conversation_id == conversation_id)
            for word in query.split():
                low = word.lower()
                q = q.where(
                    or_(
                        func.lower(Message.content).contains(low, autoescape=True),
                        func.lower(Message.reasoning).contains(low, autoescape=True),
                    )
                )
            if start is not None:
                q = q.where(Message.created_at >= start)
            if end is not None:
                q = q.where(Message.created_at <= end)
            rows = await s.scalars(q.order_by(Message.seq.desc()).limit(limit))
            return [MessageData.model_validate(r) for r in rows]

    async def reset(self, conversation_id: str) -> int:
        """Take every message of the conversation out of its context window (they stay in
        recall: searchable, listed); returns how many left it."""
        stmts = [
            Stmt(
                "UPDATE messages SET in_context = ? WHERE conversation_id = ? AND in_context = ? "
                "RETURNING id",
                (False, conversation_id, True),
                returns=True,
            ),
            Stmt(_BUMP, (conversation_id,), returns=True),
        ]
        results = await self.db.batch(stmts, write=True)
        self.cache.drop(conversation_id)
        return len(results[0])

    async def count(self, agent_id: str) -> int:
        async with self.db.read() as s:
            return int(
                await s.scalar(select(func.count()).where(Message.agent_id == agent_id)) or 0
            )
