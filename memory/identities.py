"""Callers as Letta identities: the caller key (a phone number, an app's user id) of a user's
agents, the agents they called, and erasure of everything a caller left behind."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import IdentityData, NotFound
from memory.orm import (
    Agent,
    Block,
    Conversation,
    Identity,
    IdentityAgent,
    Message,
    Outbox,
    Passage,
    SleeptimeState,
)

MAX_CALLER_KEY = 128
_FIELDS = {"name", "identifier_key", "identity_type", "properties"}


class BadCallerKey(ValueError):
    """A caller key that is empty, too long or holds control characters."""


def check_caller_key(key: str) -> str:
    """The caller key as stored, or BadCallerKey naming the problem."""
    if not isinstance(key, str) or not key.strip():
        raise BadCallerKey("caller key must be a non-empty string")
    if len(key) > MAX_CALLER_KEY:
        raise BadCallerKey(f"caller key is {len(key)} characters; at most {MAX_CALLER_KEY}")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in key):
        raise BadCallerKey("caller key must not contain control characters")
    return key.strip()


@dataclass(slots=True)
class Erased:
    """What an erasure removed (counts), and the agents whose caches must be dropped."""

    agent_ids: list[str]
    conversations: int
    messages: int
    blocks: int
    passages: int
    outbox: int


class IdentityStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def resolve(
        self, user_id: str | None, key: str, *, agent_id: str | None = None
    ) -> IdentityData:
        """The identity of caller `key` among `user_id`'s, created on first contact; with
        `agent_id`, also recorded as a caller of that agent."""
        key = check_caller_key(key)
        for _ in range(3):
            found = await self.by_key(user_id, key)
            if found is None:
                try:
                    async with self.db.write() as s:
                        row = Identity(
                            id=new_id("identity"),
                            user_id=user_id,
                            identifier_key=key,
                            name=key,
                            identity_type="user",
                            properties=[],
                        )
                        s.add(row)
                    found = IdentityData.model_validate(row)
                except IntegrityError:  # created concurrently: read it
                    continue
            if agent_id is not None:
                await self.attach(found.id, agent_id)
            return found
        raise RuntimeError(f"could not create the identity of a caller of {agent_id}")

    async def by_key(self, user_id: str | None, key: str) -> IdentityData | None:
        async with self.db.read() as s:
            q = select(Identity).where(Identity.identifier_key == key)
            q = q.where(Identity.user_id == user_id if user_id else Identity.user_id.is_(None))
            row = await s.scalar(q)
            return IdentityData.model_validate(row) if row is not None else None

    async def get(self, identity_id: str, user_id: str | None, *, scoped: bool) -> IdentityData:
        async with self.db.read() as s:
            row = await s.get(Identity, identity_id)
        if row is None or (scoped and row.user_id != user_id):
            raise NotFound("identity", identity_id)
        return IdentityData.model_validate(row)

    async def page(
        self,
        user_id: str | None,
        *,
        scoped: bool,
        agent_id: str | None = None,
        identifier_key: str | None = None,
        name: str | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> list[IdentityData]:
        async with self.db.read() as s:
            q = select(Identity)
            if scoped:
                q = q.where(Identity.user_id == user_id if user_id else Identity.user_id.is_(None))
            if agent_id is not None:
                q = q.join(IdentityAgent, IdentityAgent.identity_id == Identity.id).where(
                    IdentityAgent.agent_id == agent_id
                )
            if identifier_key is not None:
                q = q.where(Identity.identifier_key == identifier_key)
            if name is not None:
                q = q.where(Identity.name.icontains(name, autoescape=True))
            if after:
                cursor = await s.scalar(q.where(Identity.id == after))
                if cursor is None:
                    raise NotFound("identity", after)
                q = q.where(
                    (Identity.created_at > cursor.created_at)
                    | ((Identity.created_at == cursor.created_at) & (Identity.id > cursor.id))
                )
            rows = await s.scalars(q.order_by(Identity.created_at, Identity.id).limit(limit))
            return [IdentityData.model_validate(r) for r in rows]

    async def update(self, identity_id: str, **fields: Any) -> IdentityData:
        if "identifier_key" in fields:
            fields["identifier_key"] = check_caller_key(fields["identifier_key"])
        async with self.db.write() as s:
            row = await s.get(Identity, identity_id)
            if row is None:
                raise NotFound("identity", identity_id)
            for k, v in fields.items():
                if k in _FIELDS and v is not None:
                    setattr(row, k, v)
            row.updated_at = utcnow()
        return IdentityData.model_validate(row)

    async def agent_ids(self, identity_id: str) -> list[str]:
        async with self.db.read() as s:
            rows = await s.scalars(
                select(IdentityAgent.agent_id).where(IdentityAgent.identity_id == identity_id)
            )
            return list(rows)

    async def block_ids(self, identity_id: str) -> list[str]:
        async with self.db.read() as s:
            return list(await s.scalars(select(Block.id).where(Block.identity_id == identity_id)))

    async def attach(self, identity_id: str, agent_id: str) -> None:
        """Record `agent_id` as called by the identity (idempotent)."""
        async with self.db.write() as s:
            if await s.get(IdentityAgent, (identity_id, agent_id)) is None:
                s.add(IdentityAgent(identity_id=identity_id, agent_id=agent_id))

    async def detach(self, identity_id: str, agent_id: str) -> bool:
        async with self.db.write() as s:
            res = await s.execute(
                delete(IdentityAgent).where(
                    IdentityAgent.identity_id == identity_id, IdentityAgent.agent_id == agent_id
                )
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]

    async def erase(self, identity_id: str) -> Erased:
        """Right to erasure, in one transaction: the caller's conversations and messages, their
        own blocks (with their history), their passages, queued transcript events and
        sleeptime state, then the identity. Agent-wide memory and other callers' stay."""
        async with self.db.write() as s:
            if await s.get(Identity, identity_id) is None:
                raise NotFound("identity", identity_id)
            agents = set(
                await s.scalars(
                    select(IdentityAgent.agent_id).where(IdentityAgent.identity_id == identity_id)
                )
            )
            agents |= set(
                await s.scalars(
                    select(Conversation.agent_id).where(Conversation.identity_id == identity_id)
                )
            )
            passage_agents = {  # a caller's passages are in their agents' own archives
                a
                for a in await s.scalars(
                    select(Passage.agent_id).where(Passage.identity_id == identity_id)
                )
                if a
            }
            counts = []
            for stmt in (
                delete(Message).where(Message.identity_id == identity_id),
                delete(Conversation).where(Conversation.identity_id == identity_id),
                delete(Block).where(Block.identity_id == identity_id),
                delete(Passage).where(Passage.identity_id == identity_id),
                delete(Outbox).where(Outbox.identity_id == identity_id),
            ):
                counts.append(int((await s.execute(stmt)).rowcount or 0))  # type: ignore[attr-defined]
            await s.execute(delete(SleeptimeState).where(SleeptimeState.identity_id == identity_id))
            await s.execute(delete(IdentityAgent).where(IdentityAgent.identity_id == identity_id))
            await s.execute(delete(Identity).where(Identity.id == identity_id))
            if passage_agents:  # cached archival indexes reload without the erased rows
                await s.execute(
                    update(Agent)
                    .where(Agent.id.in_(passage_agents))
                    .values(
                        archival_version=Agent.archival_version + 1,
                        archival_deletes=Agent.archival_deletes + 1,
                        updated_at=Agent.updated_at,
                    )
                )
        messages, conversations, blocks, passages, outbox = counts
        return Erased(
            sorted(agents | passage_agents), conversations, messages, blocks, passages, outbox
        )
