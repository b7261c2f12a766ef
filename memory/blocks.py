"""Core memory blocks: versioned, limit-checked writes with history; nothing is silently lost."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import (
    Actor,
    BlockChange,
    BlockData,
    BlockSpec,
    Conflict,
    LimitExceeded,
    NotFound,
)
from memory.orm import Block, BlockAgent, BlockHistory

log = logging.getLogger(__name__)

# (agent_id, label, version, scope, identity_id): who sees it is agents.memory_events's rule
ChangeHook = Callable[[str, str, int, str, str | None], Awaitable[None]]
Edit = Callable[[str], str]


class BlockStore:
    def __init__(self, db: Database, on_change: ChangeHook | None = None) -> None:
        self.db = db
        self.on_change = on_change

    @staticmethod
    def add_specs(session: AsyncSession, agent_id: str, specs: Sequence[BlockSpec]) -> None:
        """Create blocks inside the caller's transaction (agent creation)."""
        for spec in specs:
            if len(spec.value) > spec.limit:
                raise LimitExceeded(
                    f"block '{spec.label}' value is {len(spec.value)} chars, limit {spec.limit}"
                )
            values = spec.model_dump(exclude={"scope"})
            session.add(
                Block(
                    id=new_id("block"),
                    agent_id=agent_id,
                    version=1,
                    scope=spec.resolved_scope(),
                    **values,
                )
            )

    async def all(self, agent_id: str, identity_id: str | None = None) -> list[BlockData]:
        """The agent's blocks as `identity_id`'s turns see them: agent-wide blocks, attached
        shared blocks, and the caller's own copy in place of each caller template."""
        async with self.db.read() as s:
            rows = await s.scalars(_visible(agent_id, identity_id))
            return resolve_view([BlockData.model_validate(r) for r in rows])

    async def get(self, agent_id: str, label: str, identity_id: str | None = None) -> BlockData:
        for b in await self.all(agent_id, identity_id):
            if b.label == label:
                return b
        raise NotFound("block", label)

    async def versions(self, agent_id: str, identity_id: str | None = None) -> dict[str, int]:
        return {b.label: b.version for b in await self.all(agent_id, identity_id)}

    async def ensure_caller_copies(self, agent_id: str, identity_id: str) -> int:
        """Give the caller their own copy of each of the agent's caller-scoped blocks that
        they lack, from the template's value (first contact). Returns how many were made."""
        async with self.db.read() as s:
            rows = list(
                await s.scalars(
                    select(Block).where(
                        Block.agent_id == agent_id,
                        or_(Block.identity_id.is_(None), Block.identity_id == identity_id),
                    )
                )
            )
        have = {r.label for r in rows if r.identity_id == identity_id}
        missing = [r for r in rows if r.scope == "caller" and r.identity_id is None]
        missing = [r for r in missing if r.label not in have]
        if not missing:
            return 0
        seeds = await self._seeds(missing)
        try:
            async with self.db.write() as s:
                for t in missing:
                    s.add(
                        Block(
                            id=new_id("block"),
                            agent_id=agent_id,
                            identity_id=identity_id,
                            scope="caller",
                            label=t.label,
                            value=seeds[t.id],
                            limit=t.limit,
                            description=t.description,
                            read_only=t.read_only,
                            sleeptime_editable=t.sleeptime_editable,
                            version=1,
                        )
                    )
        except IntegrityError:  # another call of the same caller made them first
            return 0
        return len(missing)

    async def modify(
        self,
        agent_id: str,
        label: str,
        edit: Edit | None = None,
        *,
        actor: Actor,
        expected_version: int | None = None,
        fields: dict[str, Any] | None = None,
        retries: int = 8,
        identity_id: str | None = None,
    ) -> BlockData:
        """Read-modify-write with compare-and-set on `version`.

        `edit` maps the current value to the new one and is re-applied to the newest value
        when a concurrent writer won (so both edits land). With `expected_version` a stale
        write raises Conflict instead. `fields` sets limit/description/read_only.
        """
        block_id = (await self.get(agent_id, label, identity_id)).id
        return await self.modify_id(
            block_id,
            edit,
            actor=actor,
            expected_version=expected_version,
            fields=fields,
            retries=retries,
            label=label,
        )

    async def rename(self, agent_id: str, label: str, new_label: str) -> BlockData:
        """Give the agent's block `label` a new label: its own block with the callers' copies
        (one name for all), or an attached shared block itself. Conflict if the agent sees a
        block of that label already."""
        block = await self.get(agent_id, label)
        if new_label == label:
            return block
        if new_label in {b.label for b in await self.all(agent_id)}:
            raise Conflict(f"agent {agent_id} already has a block labelled '{new_label}'")
        async with self.db.write() as s:
            own = block.agent_id == agent_id  # its own: the template and every caller's copy
            q = update(Block).where(Block.agent_id == agent_id, Block.label == label)
            await s.execute(
                (q if own else update(Block).where(Block.id == block.id)).values(label=new_label)
            )
        renamed = await self.get(agent_id, new_label)
        await self.notify(renamed)
        return renamed

    async def modify_id(
        self,
        block_id: str,
        edit: Edit | None = None,
        *,
        actor: Actor,
        expected_version: int | None = None,
        fields: dict[str, Any] | None = None,
        retries: int = 8,
        label: str | None = None,
    ) -> BlockData:
        """`modify` of a block named by id (a shared block has no owning agent)."""
        name = label or block_id
        for _ in range(retries):
            result = await self._try_modify(block_id, name, edit, actor, expected_version, fields)
            if result is not None:
                await self.notify(result)
                return result
        raise Conflict(f"block '{name}' kept changing; gave up after {retries} attempts")

    async def _seeds(self, templates: Sequence[Block]) -> dict[str, str]:
        """The value a caller's copy starts from: the template as a user (the operator) last
        set it, else as created; never what the agent or sleeptime wrote into it from
        conversations without a caller (those words are not the new caller's)."""
        seeds = {t.id: t.value for t in templates}
        async with self.db.read() as s:
            rows = await s.scalars(
                select(BlockHistory)
                .where(BlockHistory.block_id.in_(list(seeds)))
                .order_by(BlockHistory.id)
            )
            first: dict[str, str] = {}
            by_user: dict[str, str] = {}
            for h in rows:
                first.setdefault(h.block_id, h.old_value)
                if h.actor == "user":
                    by_user[h.block_id] = h.new_value
        for block_id in seeds:
            if block_id in by_user:
                seeds[block_id] = by_user[block_id]
            elif block_id in first:
                seeds[block_id] = first[block_id]
        return seeds

    async def _try_modify(
        self,
        block_id: str,
        label: str,
        edit: Edit | None,
        actor: Actor,
        expected_version: int | None,
        fields: dict[str, Any] | None,
    ) -> BlockData | None:
        async with self.db.write() as s:
            # FOR UPDATE serialises writers on PostgreSQL; SQLite holds BEGIN IMMEDIATE already
            row = await s.scalar(select(Block).where(Block.id == block_id).with_for_update())
            if row is None:
                raise NotFound("block", label)
            if expected_version is not None and row.version != expected_version:
                raise Conflict(
                    f"block '{label}' is at version {row.version}, not {expected_version}"
                )
            new = edit(row.value) if edit is not None else row.value
            return await self._write(s, row, new, actor, dict(fields or {}))

    async def write_in(
        self,
        session: AsyncSession,
        block_id: str,
        expected_version: int,
        value: str,
        *,
        actor: Actor,
    ) -> BlockData | None:
        """Set a block inside the caller's transaction if it is still at `expected_version`
        (None if another writer got there first). The caller calls `notify` after commit."""
        row = await session.scalar(select(Block).where(Block.id == block_id).with_for_update())
        if row is None:
            raise NotFound("block", block_id)
        if row.version != expected_version:
            return None
        return await self._write(session, row, value, actor, {})

    async def notify(self, block: BlockData) -> None:
        """Tell every agent that sees the block (its owner and the agents it is attached to)."""
        if self.on_change is None:
            return
        for agent_id in await self.agents_of(block):
            await self.on_change(
                agent_id, block.label, block.version, block.scope, block.identity_id
            )

    async def agents_of(self, block: BlockData) -> list[str]:
        async with self.db.read() as s:
            attached = list(
                await s.scalars(select(BlockAgent.agent_id).where(BlockAgent.block_id == block.id))
            )
        return ([block.agent_id] if block.agent_id else []) + attached

    @staticmethod
    async def _write(
        s: AsyncSession, row: Block, new: str, actor: Actor, values: dict[str, Any]
    ) -> BlockData | None:
        """Compare-and-set `row` (as read) to `new` with a history row; None if it moved on."""
        old = row.value
        limit = int(values.get("limit", row.limit))
        if len(new) > limit:
            raise LimitExceeded(
                f"block '{row.label}' value would be {len(new)} chars, limit {limit}"
            )
        values.update(value=new, version=row.version + 1, updated_at=utcnow())
        res = await s.execute(
            update(Block)
            .where(Block.id == row.id, Block.version == row.version)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount != 1:  # type: ignore[attr-defined]
            return None
        s.add(
            BlockHistory(
                block_id=row.id,
                agent_id=row.agent_id or "",
                label=row.label,
                version=row.version + 1,
                actor=actor,
                old_value=old,
                new_value=new,
            )
        )
        await s.flush()
        fresh = await s.get(Block, row.id, populate_existing=True)
        return BlockData.model_validate(fresh)

    async def set_value(
        self, agent_id: str, label: str, value: str, *, actor: Actor, identity_id: str | None = None
    ) -> BlockData:
        return await self.modify(
            agent_id, label, lambda _old: value, actor=actor, identity_id=identity_id
        )

    async def history(
        self, agent_id: str, label: str, limit: int = 100, identity_id: str | None = None
    ) -> list[BlockChange]:
        block = await self.get(agent_id, label, identity_id)
        async with self.db.read() as s:
            rows = await s.scalars(
                select(BlockHistory)
                .where(BlockHistory.block_id == block.id)
                .order_by(BlockHistory.id.desc())
                .limit(limit)
            )
            return [BlockChange.model_validate(r) for r in rows]


def _visible(agent_id: str, identity_id: str | None) -> Any:
    """Blocks a turn of `identity_id` on `agent_id` may see (before `resolve_view`)."""
    own: Any = Block.identity_id.is_(None)
    if identity_id is not None:
        own = or_(own, Block.identity_id == identity_id)
    attached = select(BlockAgent.block_id).where(BlockAgent.agent_id == agent_id)
    return (
        select(Block)
        .where(or_((Block.agent_id == agent_id) & own, Block.id.in_(attached)))
        .order_by(Block.created_at, Block.label)
    )


def resolve_view(blocks: Sequence[BlockData]) -> list[BlockData]:
    """One block per label: a caller's own copy replaces the template of the same label.
    Order: as given (created_at, label), the copy taking the template's place."""
    copies = {b.label: b for b in blocks if b.identity_id is not None}
    out: list[BlockData] = []
    for b in blocks:
        if b.identity_id is not None:
            continue
        out.append(copies.pop(b.label, b))
    return out + list(copies.values())


def compile_blocks(blocks: Sequence[BlockData]) -> str:
    """Render blocks for the system prompt (Letta's <memory_blocks> layout). Open files (blocks
    of scope "file") are not core memory: memory.open_files.compile_directories shows them."""
    parts = ["<memory_blocks>"]
    for b in blocks:
        if b.scope == "file":
            continue
        parts.append(
            f"<{b.label}>\n<description>{b.description or ''}</description>\n"
            f"<metadata>chars_current={len(b.value)} chars_limit={b.limit}</metadata>\n"
            f"<value>\n{b.value}\n</value>\n</{b.label}>"
        )
    parts.append("</memory_blocks>")
    return "\n".join(parts)
