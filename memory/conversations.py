"""Conversations: one dialogue on an agent, with its own context window (messages), summary
and turn lock (the agent loop locks the conversation id). The agent's blocks are shared; a
caller's conversation also sees that caller's own blocks. Many run at once on one agent.

Every agent has a default conversation (`default_conversation_id`, Letta's `default`) that
the agent routes talk to. A caller has one open conversation per agent by default and comes
back to it (`open_for`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, or_, select, tuple_

from memory.db import Database
from memory.ids import default_conversation_id, new_id, utcnow
from memory.models import ConversationData, NotFound
from memory.orm import Conversation, Message

DEFAULT = "default"  # the id Letta clients use for an agent's default conversation
_FIELDS = {"summary", "model", "archived"}


class ConversationStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(
        self,
        agent_id: str,
        *,
        identity_id: str | None = None,
        user_id: str | None = None,
        source: str = "text",
        summary: str | None = None,
        model: str | None = None,
        conversation_id: str | None = None,
    ) -> ConversationData:
        row = Conversation(
            id=conversation_id or new_id("conv"),
            agent_id=agent_id,
            identity_id=identity_id,
            user_id=user_id,
            source=source,
            summary=summary,
            model=model,
            archived=False,
            messages_version=0,
        )
        async with self.db.write() as s:
            s.add(row)
        return ConversationData.model_validate(row)

    async def ensure_default(self, agent_id: str, user_id: str | None = None) -> str:
        """The agent's default conversation, created if missing (agents made before it)."""
        conv_id = default_conversation_id(agent_id)
        async with self.db.write() as s:
            if await s.get(Conversation, conv_id) is None:
                s.add(Conversation(id=conv_id, agent_id=agent_id, user_id=user_id, source="text"))
        return conv_id

    async def get(self, conversation_id: str, agent_id: str | None = None) -> ConversationData:
        """The conversation; with `agent_id`, only if it belongs to that agent."""
        async with self.db.read() as s:
            row = await s.get(Conversation, conversation_id)
        if row is None or (agent_id is not None and row.agent_id != agent_id):
            raise NotFound("conversation", conversation_id)
        return ConversationData.model_validate(row)

    async def open_for(
        self,
        agent_id: str,
        *,
        identity_id: str | None,
        requested: str | None = None,
        source: str = "voice",
        user_id: str | None = None,
        new: bool = False,
    ) -> ConversationData:
        """The conversation a call or request talks in.

        `requested` must be this agent's and this caller's (else NotFound: another caller's
        conversation id behaves exactly like an unknown one). Without it, a caller continues
        their newest open conversation (unless `new`); a call without a caller gets a new
        conversation of its own (anonymous callers never share a context)."""
        if requested:
            conv = await self.get(requested, agent_id)
            if conv.identity_id != identity_id or conv.archived:
                raise NotFound("conversation", requested)
            await self.touch(conv.id)
            return conv
        if identity_id is not None and not new:
            async with self.db.read() as s:
                row = await s.scalar(
                    select(Conversation)
                    .where(
                        Conversation.agent_id == agent_id,
                        Conversation.identity_id == identity_id,
                        Conversation.archived.is_(False),
                    )
                    .order_by(Conversation.last_active_at.desc())
                    .limit(1)
                )
            if row is not None:
                await self.touch(row.id)
                return ConversationData.model_validate(row)
        return await self.create(agent_id, identity_id=identity_id, user_id=user_id, source=source)

    async def touch(self, conversation_id: str) -> None:
        async with self.db.write() as s:
            row = await s.get(Conversation, conversation_id)
            if row is not None:
                row.last_active_at = utcnow()

    async def page(
        self,
        *,
        agent_id: str | None = None,
        agent_ids: list[str] | None = None,
        identity_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
        order: str = "desc",
        summary_search: str | None = None,
        archived: bool | None = None,
        by_activity: bool = False,
    ) -> list[ConversationData]:
        """Conversations of one agent (or of the given agents), newest first by default;
        `by_activity`: by when each last had a message (`last_active_at`), not by creation.
        `after` is a conversation id of the same set (an id outside it: NotFound)."""
        async with self.db.read() as s:
            q = select(Conversation)
            if agent_id is not None:
                q = q.where(Conversation.agent_id == agent_id)
            if agent_ids is not None:
                q = q.where(Conversation.agent_id.in_(agent_ids))
            if identity_id is not None:
                q = q.where(Conversation.identity_id == identity_id)
            if archived is not None:
                q = q.where(Conversation.archived.is_(archived))
            if summary_search:
                q = q.where(Conversation.summary.icontains(summary_search, autoescape=True))
            when = Conversation.last_active_at if by_activity else Conversation.created_at
            key = tuple_(when, Conversation.id)
            desc = order == "desc"
            if after:
                cursor = await s.scalar(q.where(Conversation.id == after))
                if cursor is None:
                    raise NotFound("conversation", after)
                at = cursor.last_active_at if by_activity else cursor.created_at
                mark = tuple_(at, cursor.id)
                q = q.where(key < mark if desc else key > mark)
            ordering = (when.desc(), Conversation.id.desc()) if desc else (when, Conversation.id)
            rows = await s.scalars(q.order_by(*ordering).limit(limit))
            return [ConversationData.model_validate(r) for r in rows]

    async def update(self, conversation_id: str, **fields: Any) -> ConversationData:
        async with self.db.write() as s:
            row = await s.get(Conversation, conversation_id)
            if row is None:
                raise NotFound("conversation", conversation_id)
            for key, value in fields.items():
                if key in _FIELDS:
                    setattr(row, key, value)
            row.updated_at = utcnow()
        return await self.get(conversation_id)

    async def delete(self, conversation_id: str) -> None:
        """Delete the conversation and its messages (one transaction; the foreign key
        cascades on PostgreSQL and SQLite alike, the explicit delete makes it certain)."""
        async with self.db.write() as s:
            await s.execute(delete(Message).where(Message.conversation_id == conversation_id))
            res = await s.execute(delete(Conversation).where(Conversation.id == conversation_id))
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("conversation", conversation_id)

    async def in_context_ids(self, conversation_id: str) -> list[str]:
        """Letta's `in_context_message_ids`: the system message, then the context window."""
        async with self.db.read() as s:
            rows = await s.scalars(
                select(Message.id)
                .where(
                    Message.conversation_id == conversation_id,
                    or_(Message.in_context.is_(True), Message.kind == "system"),
                )
                .order_by(Message.seq)
            )
            return list(rows)

    async def set_system(
        self, conversation_id: str, agent_id: str, identity_id: str | None, text: str
    ) -> None:
        """The conversation's system message, as Letta lists it first: stored when the
        conversation is made, its text replaced on recompile. It stays out of the context
        window (each turn compiles the prompt from the blocks as they are then)."""
        async with self.db.write() as s:
            row = await s.scalar(
                select(Message).where(
                    Message.conversation_id == conversation_id, Message.kind == "system"
                )
            )
            if row is not None:
                row.content = text
                return
            s.add(
                Message(
                    id=new_id("message"),
                    agent_id=agent_id,
                    conversation_id=conversation_id,
                    identity_id=identity_id,
                    role="system",
                    kind="system",
                    content=text,
                    tool_calls=[],
                    in_context=False,
                    created_at=utcnow(),
                )
            )
