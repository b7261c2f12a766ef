"""Custom tools registered through the API (stored and listed; built-ins live in code)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import or_, select

from memory.db import Database
from memory.orm import Tool, new_id


class ToolData(BaseModel):
    id: str
    user_id: str | None
    name: str
    description: str | None
    json_schema: dict[str, Any]
    source_type: str
    source_code: str | None
    tags: list[str]
    created_at: datetime


class ToolStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(self, user_id: str | None, limit: int = 100) -> list[ToolData]:
        async with self.db.read() as s:
            q = select(Tool).order_by(Tool.created_at, Tool.id).limit(limit)
            if user_id is not None:
                q = q.where(or_(Tool.user_id == user_id, Tool.user_id.is_(None)))
            return [ToolData.model_validate(r, from_attributes=True) for r in await s.scalars(q)]

    async def names(self, user_id: str | None) -> set[str]:
        return {t.name for t in await self.page(user_id, limit=10_000)}

    async def upsert(
        self, user_id: str | None, name: str, *, create_only: bool = False, **fields: Any
    ) -> tuple[ToolData, bool]:
        """Create, or update the tool of that name (PUT). Returns (tool, created)."""
        async with self.db.write() as s:
            row = await s.scalar(
                select(Tool).where(
                    Tool.name == name,
                    Tool.user_id.is_(user_id) if user_id is None else Tool.user_id == user_id,
                )
            )
            created = row is None
            if row is None:
                row = Tool(id=new_id("tool"), user_id=user_id, name=name)
                s.add(row)
            elif create_only:
                from memory.models import Conflict

                raise Conflict(f"a tool named '{name}' already exists")
            for key, value in fields.items():
                setattr(row, key, value)
            await s.flush()
            return ToolData.model_validate(row, from_attributes=True), created
