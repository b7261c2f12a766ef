"""Custom tools registered through the API (built-ins live in code), and which agents use them.

Ownership: a tool belongs to a user (user_id) or to the server (user_id None, made with the
server key). A user sees and attaches their own tools and the server's; another user's tool is
'not found'. Agents refer to tools by name (AgentData.tool_names): renaming or deleting a tool
updates the agents that use it in the same transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import Conflict, NotFound
from memory.orm import Agent, Tool

FIELDS = {
    "name",
    "description",
    "json_schema",
    "source_type",
    "source_code",
    "tags",
    "voice_safe",
    "return_char_limit",
}


class ToolData(BaseModel):
    id: str
    user_id: str | None
    name: str
    description: str | None
    json_schema: dict[str, Any]
    source_type: str
    source_code: str | None
    tool_type: str = "custom"
    tags: list[str]
    voice_safe: bool = True
    mcp_server_id: str | None = None
    return_char_limit: int | None = None  # None: the server's VG_TOOL_RETURN_CHAR_LIMIT
    created_at: datetime


def _data(row: Tool) -> ToolData:
    return ToolData.model_validate(row, from_attributes=True)


def _visible(user_id: str | None) -> Any:
    return or_(Tool.user_id == user_id, Tool.user_id.is_(None))


def _owned(user_id: str | None) -> Any:
    return Tool.user_id.is_(None) if user_id is None else Tool.user_id == user_id


class ToolStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(self, user_id: str | None, limit: int = 100) -> list[ToolData]:
        """Oldest first. A user sees their tools and the server's; None (the server) sees all."""
        async with self.db.read() as s:
            q = select(Tool).order_by(Tool.created_at, Tool.id).limit(limit)
            if user_id is not None:
                q = q.where(_visible(user_id))
            return [_data(r) for r in await s.scalars(q)]

    async def names(self, user_id: str | None) -> set[str]:
        return {t.name for t in await self.page(user_id, limit=10_000)}

    async def get(self, tool_id: str, user_id: str | None, *, scoped: bool) -> ToolData:
        async with self.db.read() as s:
            row = await s.get(Tool, tool_id)
            if row is None or (scoped and row.user_id not in (user_id, None)):
                raise NotFound("tool", tool_id)
            return _data(row)

    async def by_names(self, user_id: str | None, names: list[str]) -> list[ToolData]:
        """The tools of those names an agent of `user_id` uses (the user's own win over the
        server's of the same name)."""
        if not names:
            return []
        async with self.db.read() as s:
            rows = await s.scalars(select(Tool).where(Tool.name.in_(names), _visible(user_id)))
            found: dict[str, ToolData] = {}
            for row in rows:
                if row.name not in found or row.user_id is not None:
                    found[row.name] = _data(row)
            return list(found.values())

    async def upsert(
        self, user_id: str | None, name: str, *, create_only: bool = False, **fields: Any
    ) -> tuple[ToolData, bool]:
        """Create, or update the tool of that name (PUT). Returns (tool, created). A concurrent
        create of the same name (the unique index of migration 0004) makes this one a clean
        409 (create) or an update of the row that won (PUT)."""
        try:
            return await self._upsert(user_id, name, create_only, fields)
        except IntegrityError as exc:
            if create_only:
                raise Conflict(f"a tool named '{name}' already exists") from exc
            return await self._upsert(user_id, name, create_only, fields)

    async def _upsert(
        self, user_id: str | None, name: str, create_only: bool, fields: dict[str, Any]
    ) -> tuple[ToolData, bool]:
        async with self.db.write() as s:
            row = await s.scalar(select(Tool).where(Tool.name == name, _owned(user_id)))
            created = row is None
            if row is None:
                row = Tool(id=new_id("tool"), user_id=user_id, name=name, created_at=utcnow())
                s.add(row)
            elif create_only:
                raise Conflict(f"a tool named '{name}' already exists")
            for key, value in fields.items():
                if key in FIELDS:
                    setattr(row, key, value)
            await s.flush()
            return _data(row), created

    async def update(self, tool_id: str, **fields: Any) -> ToolData:
        """Change a tool; a new name is checked for clashes and carried into its agents."""
        try:
            return await self._update(tool_id, fields)
        except IntegrityError as exc:  # renamed onto a name created concurrently
            raise Conflict(f"a tool named '{fields.get('name')}' already exists") from exc

    async def _update(self, tool_id: str, fields: dict[str, Any]) -> ToolData:
        async with self.db.write() as s:
            row = await s.get(Tool, tool_id)
            if row is None:
                raise NotFound("tool", tool_id)
            new_name = fields.get("name", row.name)
            if new_name != row.name:
                clash = await s.scalar(
                    select(Tool.id).where(Tool.name == new_name, _owned(row.user_id))
                )
                if clash is not None:
                    raise Conflict(f"a tool named '{new_name}' already exists")
                await self._rename_in_agents(s, row, new_name)
            for key, value in fields.items():
                if key in FIELDS:
                    setattr(row, key, value)
            await s.flush()
            return _data(row)

    async def delete(self, tool_id: str) -> ToolData:
        """Delete a tool and detach it from the agents that use it."""
        async with self.db.write() as s:
            row = await s.get(Tool, tool_id)
            if row is None:
                raise NotFound("tool", tool_id)
            data = _data(row)
            await self._rename_in_agents(s, row, None)
            await s.delete(row)
            return data

    async def set_attached(self, agent_id: str, name: str, attached: bool) -> None:
        """Attach (append the name) or detach a tool, atomically with other writers."""
        async with self.db.write() as s:
            row = await s.get(Agent, agent_id, with_for_update=True)
            if row is None:
                raise NotFound("agent", agent_id)
            names = [n for n in row.tool_names if n != name]
            if attached:
                names.append(name)
            if names != list(row.tool_names):
                row.tool_names = names
                row.updated_at = utcnow()

    async def _rename_in_agents(self, s: AsyncSession, tool: Tool, new: str | None) -> None:
        q = select(Agent)
        if tool.user_id is not None:
            q = q.where(Agent.user_id == tool.user_id)
        for agent in await s.scalars(q.with_for_update()):
            if tool.name in agent.tool_names:
                renamed = [new if n == tool.name else n for n in agent.tool_names]
                agent.tool_names = [n for n in renamed if n is not None]
                agent.updated_at = utcnow()
