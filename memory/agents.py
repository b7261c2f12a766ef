"""Agents and users (API keys). Another user's agent is 'not found'."""

from __future__ import annotations

import hashlib
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select, tuple_

from memory.blocks import BlockStore, resolve_view
from memory.db import Database
from memory.ids import default_archive_id, default_conversation_id, new_id, utcnow
from memory.models import AgentData, BlockData, BlockSpec, FolderView, NotFound
from memory.orm import Agent, Archive, Block, BlockAgent, Conversation, User
from memory.raw import Codec, Row, Stmt

AGENT_FIELDS = {
    "name",
    "description",
    "system",
    "model",
    "embedding",
    "tags",
    "tool_names",
    "tool_rules",
    "greeting",
    "voice_default",
    "context_window",
    "metadata",
    "transfer_targets",
    "call_tools",
    "voicemail_message",
}


AGENTS = Codec(Agent.__table__)  # type: ignore[arg-type]
BLOCKS = Codec(Block.__table__)  # type: ignore[arg-type]
# the agent and the blocks a caller's turn sees in one statement: one snapshot, one thread
# hop / round trip. Its own agent-wide blocks and templates, the caller's own copies (an
# identity of NULL matches none), and the shared blocks attached to it.
_GET = (
    f"SELECT {AGENTS.columns('a')}, {BLOCKS.columns('b', 'b_')} FROM agents a "
    "LEFT JOIN blocks b ON b.agent_id = a.id AND (b.identity_id IS NULL OR b.identity_id = ?) "
    "WHERE a.id = ? UNION ALL "
    f"SELECT {AGENTS.columns('a')}, {BLOCKS.columns('b', 'b_')} FROM agents a "
    "JOIN blocks_agents ba ON ba.agent_id = a.id JOIN blocks b ON b.id = ba.block_id "
    "WHERE a.id = ?"
)

# the folders attached to the agent and their files (the prompt's `<directories>`)
_FOLDERS = (
    "SELECT f.id, f.name, f.description, f.instructions, fr.id AS file_id, fr.file_name "
    "FROM folders_agents fa JOIN folders f ON f.id = fa.folder_id "
    "LEFT JOIN files fr ON fr.folder_id = f.id WHERE fa.agent_id = ? "
    "ORDER BY f.created_at, f.id, fr.created_at, fr.id"
)

_GET_IN = _GET.replace(
    "b.identity_id = ?", "b.identity_id = (SELECT identity_id FROM conversations WHERE id = ?)"
)


def own_archive(agent_id: str, user_id: str | None, name: str, values: dict[str, Any]) -> Archive:
    """The agent's default archive: its archival memory (migration 0007)."""
    return Archive(
        id=default_archive_id(agent_id),
        user_id=user_id,
        agent_id=agent_id,
        name=f"{name}'s archive",
        embedding=str(values.get("embedding") or ""),
        metadata_={},
    )


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class AgentStore:
    TURN_CACHE = 1024  # conversations whose last decoded agent is kept (see `decode_for_turn`)

    def __init__(self, db: Database) -> None:
        self.db = db
        self._turns: OrderedDict[str, tuple[list[Row], AgentData]] = OrderedDict()

    async def create(
        self,
        *,
        user_id: str | None,
        blocks: Sequence[BlockSpec],
        agent_id: str | None = None,
        **fields: Any,
    ) -> AgentData:
        """A new agent; `agent_id` given: that id (a sleeptime agent's is derived from its
        primary's), else a fresh one."""
        agent_id = agent_id or new_id("agent")
        values = {k: v for k, v in fields.items() if k in AGENT_FIELDS}
        values["metadata_"] = values.pop("metadata", None) or {}
        async with self.db.write() as s:
            s.add(Agent(id=agent_id, user_id=user_id, **values))
            await s.flush()
            s.add(own_archive(agent_id, user_id, str(values.get("name") or "agent"), values))
            BlockStore.add_specs(s, agent_id, blocks)
            s.add(
                Conversation(
                    id=default_conversation_id(agent_id),
                    agent_id=agent_id,
                    user_id=user_id,
                    source="text",
                )
            )
        return await self.get(agent_id)

    @staticmethod
    def get_stmt(agent_id: str, identity_id: str | None = None) -> Stmt:
        """The agent read of `get` as a statement, for a batch with others."""
        return Stmt(_GET, (identity_id, agent_id, agent_id), returns=True)

    @staticmethod
    def folders_stmt(agent_id: str) -> Stmt:
        """The agent's folders and their files, read with the agent (`decode`)."""
        return Stmt(_FOLDERS, (agent_id,), returns=True)

    @staticmethod
    def get_stmt_in(agent_id: str, conversation_id: str) -> Stmt:
        """`get_stmt` for the caller of `conversation_id` (a subquery: one statement)."""
        return Stmt(_GET_IN, (conversation_id, agent_id, agent_id), returns=True)

    async def get(
        self,
        agent_id: str,
        *,
        user_id: str | None = None,
        scoped: bool = False,
        identity_id: str | None = None,
    ) -> AgentData:
        """Return the agent with the blocks `identity_id`'s turns see (None: no caller, the
        agent's own blocks). With `scoped`, only if it belongs to `user_id`."""
        rows, folders = await self.db.batch(
            [self.get_stmt(agent_id, identity_id), self.folders_stmt(agent_id)]
        )
        if not rows or (scoped and rows[0]["user_id"] != user_id):
            raise NotFound("agent", agent_id)
        return self.decode(rows, folders)

    def decode(self, rows: list[Row], folders: list[Row] | None = None) -> AgentData:
        agent = _decode_agent(rows, self.db.is_sqlite)
        agent.folders = _folder_views(folders or [])
        return agent

    def decode_for_turn(
        self, conversation_id: str, rows: list[Row], folders: list[Row] | None = None
    ) -> AgentData:
        """`decode` for a turn of `conversation_id`: when the rows are those of its last
        turn (nothing of the agent or its caller's blocks changed), a copy of that turn's
        AgentData instead of a new decode. Rows are compared whole, so what one caller sees
        comes only from rows read for that caller. A copy, because a turn replaces its own
        `blocks` (agents/tools/memory_tools.py). Saves the decode: ~24 µs alone, ~0.15 ms
        per turn at 500 calls (docs/benchmarks.md, `voice_concurrency`); the comparison and the copy
        cost ~3 µs. Erasure drops a conversation's entry (`forget`)."""
        turns = self._turns
        hit = turns.get(conversation_id)
        read = [*rows, *(folders or [])]
        if hit is not None and hit[0] == read:
            turns.move_to_end(conversation_id)
            return hit[1].model_copy()
        agent = self.decode(rows, folders)
        turns[conversation_id] = (read, agent.model_copy())
        turns.move_to_end(conversation_id)
        if len(turns) > self.TURN_CACHE:
            turns.popitem(last=False)
        return agent

    def forget(self, conversation_id: str) -> None:
        """Drop the conversation's kept agent (its caller's blocks with it): erasure."""
        self._turns.pop(conversation_id, None)

    async def tags(self, *, user_id: str | None = None, scoped: bool = False) -> list[str]:
        """Every tag on the agents one may see, sorted, each once."""
        async with self.db.read() as s:
            q = select(Agent.tags)
            if scoped:
                q = q.where(Agent.user_id == user_id if user_id else Agent.user_id.is_(None))
            return sorted({str(t) for tags in await s.scalars(q) for t in tags or []})

    async def page(
        self,
        *,
        user_id: str | None = None,
        scoped: bool = False,
        name: str | None = None,
        tags: Sequence[str] | None = None,
        limit: int = 100,
        after: str | None = None,
        before: str | None = None,
        order: str = "asc",
        ids: Sequence[str] | None = None,
    ) -> list[AgentData]:
        """A page of agents (of `ids` only, when given)."""
        async with self.db.read() as s:
            q = select(Agent) if ids is None else select(Agent).where(Agent.id.in_(ids))
            if scoped:
                q = q.where(Agent.user_id == user_id if user_id else Agent.user_id.is_(None))
            if name:
                q = q.where(Agent.name == name)
            key = tuple_(Agent.created_at, Agent.id)
            desc = order == "desc"
            for cursor_id, is_after in ((after, True), (before, False)):
                cursor = await s.get(Agent, cursor_id) if cursor_id else None
                if cursor is not None and scoped and cursor.user_id != (user_id or None):
                    cursor = None  # another user's agent is an unknown cursor: ids can't be probed
                if cursor is not None:
                    mark = tuple_(cursor.created_at, cursor.id)
                    q = q.where(key > mark if is_after != desc else key < mark)
            ordering = (
                (Agent.created_at.desc(), Agent.id.desc()) if desc else (Agent.created_at, Agent.id)
            )
            q = q.order_by(*ordering)
            rows = list(await s.scalars(q if tags else q.limit(limit)))
            if tags:
                rows = [r for r in rows if set(tags) <= set(r.tags or [])]
            rows = rows[:limit]
            ids = [r.id for r in rows]
            blocks: dict[str, list[BlockData]] = {i: [] for i in ids}
            if ids:
                bq = (
                    select(Block)
                    .where(Block.agent_id.in_(ids), Block.identity_id.is_(None))
                    .order_by(Block.created_at, Block.label)
                )
                for b in await s.scalars(bq):
                    blocks[str(b.agent_id)].append(BlockData.model_validate(b))
                shared = select(BlockAgent.agent_id, Block).join(
                    Block, Block.id == BlockAgent.block_id
                )
                for agent_id, b in await s.execute(shared.where(BlockAgent.agent_id.in_(ids))):
                    blocks[agent_id].append(BlockData.model_validate(b))
            return [_agent_data(r, blocks[r.id]) for r in rows]

    async def update(self, agent_id: str, **fields: Any) -> AgentData:
        async with self.db.write() as s:
            row = await s.get(Agent, agent_id)
            if row is None:
                raise NotFound("agent", agent_id)
            for key, value in fields.items():
                if key in AGENT_FIELDS:
                    setattr(row, "metadata_" if key == "metadata" else key, value)
            row.updated_at = utcnow()
        return await self.get(agent_id)

    async def set_approval(self, agent_id: str, tool_name: str, required: bool) -> AgentData:
        """Add or remove the `requires_approval` rule of a tool, atomically with other
        writers (the rule list is the agent's `tool_rules`)."""
        async with self.db.write() as s:
            row = await s.get(Agent, agent_id, with_for_update=True)
            if row is None:
                raise NotFound("agent", agent_id)
            rules = [
                r
                for r in row.tool_rules or []
                if not (r.get("type") == "requires_approval" and r.get("tool_name") == tool_name)
            ]
            if required:
                rules.append({"tool_name": tool_name, "type": "requires_approval"})
            row.tool_rules = rules
            row.updated_at = utcnow()
        return await self.get(agent_id)

    async def delete(self, agent_id: str) -> None:
        async with self.db.write() as s:
            res = await s.execute(delete(Agent).where(Agent.id == agent_id))
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("agent", agent_id)

    async def exists(self, agent_id: str) -> bool:
        async with self.db.read() as s:
            return await s.scalar(select(Agent.id).where(Agent.id == agent_id)) is not None


class UserStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, name: str) -> tuple[str, str]:
        """Create a user; returns (user_id, api_key). The key is shown once and stored hashed."""
        key = "vgk-" + secrets.token_urlsafe(32)
        user_id = new_id("user")
        async with self.db.write() as s:
            s.add(User(id=user_id, name=name, api_key_hash=hash_key(key), api_key_prefix=key[:10]))
        return user_id, key

    async def by_key(self, key: str) -> str | None:
        async with self.db.read() as s:
            return await s.scalar(select(User.id).where(User.api_key_hash == hash_key(key)))


def _decode_agent(rows: list[Row], sqlite: bool) -> AgentData:
    """AgentData from the rows of `_GET`: one per block (block columns prefixed `b_`), blocks
    in the order `page` gives them (created_at, label)."""
    data = AGENTS.decode(rows[0], sqlite=sqlite)
    data["metadata"] = data["metadata"] or {}
    blocks = [BLOCKS.decode(r, sqlite=sqlite, prefix="b_") for r in rows if r["b_id"] is not None]
    blocks.sort(key=lambda b: (b["created_at"], b["label"]))
    data["blocks"] = resolve_view([BlockData.model_validate(b) for b in blocks])
    return AgentData.model_validate(data)


def _folder_views(rows: list[Row]) -> list[FolderView]:
    """`_FOLDERS`' rows (one per file, or one for a folder without files) as folders."""
    out: dict[str, FolderView] = {}
    for r in rows:
        view = out.get(r["id"])
        if view is None:
            view = out[r["id"]] = FolderView(
                id=r["id"], name=r["name"], description=r["description"],
                instructions=r["instructions"],
            )  # fmt: skip
        if r["file_id"] is not None:
            view.files.append((r["file_id"], r["file_name"]))
    return list(out.values())


def _agent_data(row: Agent, blocks: list[BlockData]) -> AgentData:
    data: dict[str, Any] = {c.key: getattr(row, c.key) for c in Agent.__mapper__.column_attrs}
    data["metadata"] = data.pop("metadata_") or {}
    data["blocks"] = blocks
    return AgentData.model_validate(data)
