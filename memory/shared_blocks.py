"""Blocks by id (Letta 1.x `/v1/blocks`): standalone (shared) blocks that sit on several
agents through `blocks_agents`, and any block a user may see (their agents' blocks, their
callers' own copies) so an operator can read and correct it.

Visibility: a standalone block is its creator's (`Block.user_id`); an agent's block (a caller's
copy included) is the agent owner's. Another user's block behaves exactly like an unknown id.
Edits go through `BlockStore.modify_id` (versioned compare-and-set, history, notifications to
every agent that sees the block)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, or_, select

from memory.blocks import BlockStore, resolve_view
from memory.db import Database
from memory.ids import new_id
from memory.models import BlockData, BlockSpec, Conflict, NotFound
from memory.orm import Agent, Block, BlockAgent, BlockHistory


class SharedBlocks:
    def __init__(self, db: Database, blocks: BlockStore) -> None:
        self.db = db
        self.blocks = blocks

    async def create(self, user_id: str | None, spec: BlockSpec) -> BlockData:
        row = Block(
            id=new_id("block"),
            agent_id=None,
            user_id=user_id,
            scope="agent",
            version=1,
            **spec.model_dump(exclude={"scope"}),
        )
        async with self.db.write() as s:
            s.add(row)
        return BlockData.model_validate(row)

    @staticmethod
    def _mine(user_id: str | None, scoped: bool) -> Any:
        """The blocks a (scoped) user may see: their standalone blocks and their agents'."""
        if not scoped:
            return None
        theirs = select(Agent.id).where(Agent.user_id == user_id)
        return or_(
            (Block.agent_id.is_(None)) & (Block.user_id == user_id),
            Block.agent_id.in_(theirs),
        )

    async def get(self, block_id: str, user_id: str | None, *, scoped: bool) -> BlockData:
        async with self.db.read() as s:
            q = select(Block).where(Block.id == block_id)
            mine = self._mine(user_id, scoped)
            row = await s.scalar(q.where(mine) if mine is not None else q)
        if row is None:
            raise NotFound("block", block_id)
        return BlockData.model_validate(row)

    async def page(
        self,
        user_id: str | None,
        *,
        scoped: bool,
        label: str | None = None,
        identity_id: str | None = None,
        standalone: bool | None = None,
        limit: int = 50,
        after: str | None = None,
        order: str = "asc",
    ) -> list[BlockData]:
        async with self.db.read() as s:
            q = select(Block)
            mine = self._mine(user_id, scoped)
            if mine is not None:
                q = q.where(mine)
            if label is not None:
                q = q.where(Block.label == label)
            if identity_id is not None:
                q = q.where(Block.identity_id == identity_id)
            if standalone is not None:
                q = q.where(Block.agent_id.is_(None) if standalone else Block.agent_id.isnot(None))
            desc = order == "desc"
            if after:
                cursor = await s.scalar(q.where(Block.id == after))
                if cursor is None:
                    raise NotFound("block", after)
                same = Block.created_at == cursor.created_at
                if desc:
                    q = q.where(
                        (Block.created_at < cursor.created_at) | (same & (Block.id < after))
                    )
                else:
                    q = q.where(
                        (Block.created_at > cursor.created_at) | (same & (Block.id > after))
                    )
            keys = (
                (Block.created_at.desc(), Block.id.desc()) if desc else (Block.created_at, Block.id)
            )
            rows = await s.scalars(q.order_by(*keys).limit(limit))
            return [BlockData.model_validate(r) for r in rows]

    async def delete(self, block: BlockData) -> list[str]:
        """Delete the block (its attachments and history too); the agents that saw it."""
        agents = await self.blocks.agents_of(block)
        async with self.db.write() as s:
            await s.execute(delete(BlockAgent).where(BlockAgent.block_id == block.id))
            await s.execute(delete(BlockHistory).where(BlockHistory.block_id == block.id))
            res = await s.execute(delete(Block).where(Block.id == block.id))
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("block", block.id)
        return agents

    async def attach(self, block: BlockData, agent_id: str) -> bool:
        """Attach `block` to the agent; False if the agent sees it already (idempotent).
        Conflict if the agent already has another block of that label; a caller's own block
        is never attached (every caller of the other agent would see it)."""
        if block.identity_id is not None:
            raise Conflict(f"block {block.id} is a caller's own block; it cannot be shared")
        if block.agent_id == agent_id:
            return False
        async with self.db.write() as s:
            if await s.get(BlockAgent, (block.id, agent_id)) is not None:
                return False
            own = await s.scalars(
                select(Block).where(
                    or_(
                        (Block.agent_id == agent_id) & Block.identity_id.is_(None),
                        Block.id.in_(
                            select(BlockAgent.block_id).where(BlockAgent.agent_id == agent_id)
                        ),
                    )
                )
            )
            taken = {b.label for b in resolve_view([BlockData.model_validate(r) for r in own])}
            if block.label in taken:
                raise Conflict(f"agent {agent_id} already has a block labelled '{block.label}'")
            s.add(BlockAgent(block_id=block.id, agent_id=agent_id))
        return True

    async def detach(self, block_id: str, agent_id: str) -> None:
        """NotFound if the block is not attached to the agent."""
        async with self.db.write() as s:
            res = await s.execute(
                delete(BlockAgent).where(
                    BlockAgent.block_id == block_id, BlockAgent.agent_id == agent_id
                )
            )
            if not res.rowcount:  # type: ignore[attr-defined]
                raise NotFound("block attached to this agent", block_id)
