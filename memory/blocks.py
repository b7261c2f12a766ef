"""Core memory blocks: versioned, limit-checked writes with history; nothing is silently lost."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.models import (
    Actor,
    BlockChange,
    BlockData,
    BlockSpec,
    Conflict,
    LimitExceeded,
    NotFound,
)
from memory.orm import Block, BlockHistory, new_id, utcnow

log = logging.getLogger(__name__)

ChangeHook = Callable[[str, str, int], Awaitable[None]]  # (agent_id, label, version)
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
            session.add(
                Block(id=new_id("block"), agent_id=agent_id, version=1, **spec.model_dump())
            )

    async def all(self, agent_id: str) -> list[BlockData]:
        async with self.db.read() as s:
            rows = await s.scalars(
                select(Block)
                .where(Block.agent_id == agent_id)
                .order_by(Block.created_at, Block.label)
            )
            return [BlockData.model_validate(r) for r in rows]

    async def get(self, agent_id: str, label: str) -> BlockData:
        async with self.db.read() as s:
            row = await s.scalar(
                select(Block).where(Block.agent_id == agent_id, Block.label == label)
            )
            if row is None:
                raise NotFound("block", label)
            return BlockData.model_validate(row)

    async def versions(self, agent_id: str) -> dict[str, int]:
        async with self.db.read() as s:
            rows = await s.execute(
                select(Block.label, Block.version).where(Block.agent_id == agent_id)
            )
            return {label: version for label, version in rows}

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
    ) -> BlockData:
        """Read-modify-write with compare-and-set on `version`.

        `edit` maps the current value to the new one and is re-applied to the newest value
        when a concurrent writer won (so both edits land). With `expected_version` a stale
        write raises Conflict instead. `fields` sets limit/description/read_only.
        """
        for _ in range(retries):
            result = await self._try_modify(agent_id, label, edit, actor, expected_version, fields)
            if result is not None:
                if self.on_change is not None:
                    await self.on_change(agent_id, label, result.version)
                return result
        raise Conflict(f"block '{label}' kept changing; gave up after {retries} attempts")

    async def _try_modify(
        self,
        agent_id: str,
        label: str,
        edit: Edit | None,
        actor: Actor,
        expected_version: int | None,
        fields: dict[str, Any] | None,
    ) -> BlockData | None:
        async with self.db.write() as s:
            # FOR UPDATE serialises writers on PostgreSQL; SQLite holds BEGIN IMMEDIATE already
            row = await s.scalar(
                select(Block)
                .where(Block.agent_id == agent_id, Block.label == label)
                .with_for_update()
            )
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
        agent_id: str,
        label: str,
        expected_version: int,
        value: str,
        *,
        actor: Actor,
    ) -> BlockData | None:
        """Set a block inside the caller's transaction if it is still at `expected_version`
        (None if another writer got there first). The caller calls `notify` after commit."""
        row = await session.scalar(
            select(Block).where(Block.agent_id == agent_id, Block.label == label).with_for_update()
        )
        if row is None:
            raise NotFound("block", label)
        if row.version != expected_version:
            return None
        return await self._write(session, row, value, actor, {})

    async def notify(self, block: BlockData) -> None:
        if self.on_change is not None:
            await self.on_change(block.agent_id, block.label, block.version)

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
                agent_id=row.agent_id,
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

    async def set_value(self, agent_id: str, label: str, value: str, *, actor: Actor) -> BlockData:
        return await self.modify(agent_id, label, lambda _old: value, actor=actor)

    async def history(self, agent_id: str, label: str, limit: int = 100) -> list[BlockChange]:
        await self.get(agent_id, label)
        async with self.db.read() as s:
            rows = await s.scalars(
                select(BlockHistory)
                .where(BlockHistory.agent_id == agent_id, BlockHistory.label == label)
                .order_by(BlockHistory.id.desc())
                .limit(limit)
            )
            return [BlockChange.model_validate(r) for r in rows]


def compile_blocks(blocks: Sequence[BlockData]) -> str:
    """Render blocks for the system prompt (Letta's <memory_blocks> layout)."""
    parts = ["<memory_blocks>"]
    for b in blocks:
        parts.append(
            f"<{b.label}>\n<description>{b.description or ''}</description>\n"
            f"<metadata>chars_current={len(b.value)} chars_limit={b.limit}</metadata>\n"
            f"<value>\n{b.value}\n</value>\n</{b.label}>"
        )
    parts.append("</memory_blocks>")
    return "\n".join(parts)
