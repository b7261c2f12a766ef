"""MCP servers a user registered, and the tools each serves (rows of `tools` with
`tool_type` "external_mcp" and `mcp_server_id`, attached to agents by name like any tool).

Secrets (the bearer token, custom headers, a stdio server's environment) are stored encrypted
(Fernet: AES-128-CBC + HMAC-SHA256) under the gateway's secrets key (VG_SECRETS_KEY, else the
key file made on the first start: voice_gateway/secrets_key.py); a store without a key refuses
a server with secrets, never stores them in clear. A server and its tools are
written in one transaction: nothing half-stored.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import delete, or_, select
from sqlalchemy.exc import IntegrityError

from memory.db import Database
from memory.ids import new_id, utcnow
from memory.models import Conflict, NotFound
from memory.orm import Agent, McpServer, Tool
from memory.tools import ToolData


class SecretsUnavailable(RuntimeError):
    """Secrets were given (or are stored) but no key is configured, or the key changed."""


@dataclass(slots=True)
class McpServerData:
    id: str
    user_id: str | None
    server_name: str
    server_type: str
    server_url: str | None
    command: str | None
    args: list[str]
    voice_safe_tools: list[str]
    created_at: datetime
    secrets: dict[str, Any] = field(default_factory=dict)  # token, headers, env (decrypted)


@dataclass(slots=True)
class McpToolIn:
    name: str
    description: str
    input_schema: dict[str, Any]


def _cipher(key: str | None) -> Fernet | None:
    if not key:
        return None
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(key.encode()).digest()))


class McpServerStore:
    def __init__(self, db: Database, secrets_key: str | None) -> None:
        self.db = db
        self.cipher = _cipher(secrets_key)

    def seal(self, secrets: dict[str, Any]) -> str | None:
        kept = {k: v for k, v in secrets.items() if v}
        if not kept:
            return None
        if self.cipher is None:
            raise SecretsUnavailable(
                "storing an MCP server's token, headers or environment needs a key: set "
                "VG_SECRETS_KEY (32+ random characters); secrets are never stored in clear"
            )
        return self.cipher.encrypt(json.dumps(kept).encode()).decode()

    def _open(self, sealed: str | None) -> dict[str, Any]:
        if not sealed:
            return {}
        if self.cipher is None:
            raise SecretsUnavailable("this MCP server's secrets need VG_SECRETS_KEY to be set")
        try:
            data = json.loads(self.cipher.decrypt(sealed.encode()))
        except InvalidToken as exc:
            raise SecretsUnavailable("VG_SECRETS_KEY does not open this server's secrets") from exc
        return data if isinstance(data, dict) else {}

    def _data(self, row: McpServer) -> McpServerData:
        return McpServerData(
            row.id,
            row.user_id,
            row.server_name,
            row.server_type,
            row.server_url,
            row.command,
            list(row.args or []),
            list(row.voice_safe_tools or []),
            row.created_at,
            self._open(row.secrets),
        )

    async def save(
        self,
        user_id: str | None,
        fields: dict[str, Any],
        secrets: dict[str, Any],
        tools: list[McpToolIn] | None,
        server_id: str | None = None,
    ) -> McpServerData:
        """Create (no `server_id`) or replace a server with its tools, in one transaction;
        `tools` None: the tools stored so far are kept (none for a new server)."""
        sealed = self.seal(secrets)
        try:
            async with self.db.write() as s:
                row = await s.get(McpServer, server_id) if server_id else None
                if server_id and row is None:
                    raise NotFound("mcp_server", server_id)
                if row is None:
                    row = McpServer(id=new_id("mcp_server"), user_id=user_id, created_at=utcnow())
                    s.add(row)
                for k, v in fields.items():
                    setattr(row, k, v)
                row.secrets = sealed
                row.updated_at = utcnow()
                await s.flush()
                if tools is not None:
                    await self._set_tools(s, row, tools)
                return self._data(row)
        except IntegrityError as exc:
            raise Conflict(
                f"the name '{fields.get('server_name')}' or one of its tools' names is taken"
            ) from exc

    async def _set_tools(self, s: Any, row: McpServer, tools: list[McpToolIn]) -> None:
        old = {t.name: t for t in await s.scalars(select(Tool).where(Tool.mcp_server_id == row.id))}
        safe = set(row.voice_safe_tools or [])
        for t in tools:
            clash = await s.scalar(
                select(Tool.id).where(
                    Tool.name == t.name,
                    or_(Tool.mcp_server_id.is_(None), Tool.mcp_server_id != row.id),
                    Tool.user_id.is_(None) if row.user_id is None else Tool.user_id == row.user_id,
                )
            )
            if clash is not None:
                raise Conflict(f"a tool named '{t.name}' already exists")
            tool = old.pop(t.name, None)
            if tool is None:
                tool = Tool(
                    id=new_id("tool"), user_id=row.user_id, name=t.name, created_at=utcnow()
                )
                tool.voice_safe = True  # MCP tools are voice-safe unless taken out
                s.add(tool)
            tool.description = t.description
            tool.json_schema = {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            }
            tool.source_type, tool.tool_type = "mcp", "external_mcp"
            tool.mcp_server_id = row.id
            if safe:  # the server names its voice-safe tools: only those
                tool.voice_safe = t.name in safe
            tool.tags = [f"mcp:{row.server_name}"]
        for gone in old.values():  # the server no longer serves it: detach it too
            await _detach(s, gone)
            await s.delete(gone)

    async def get(self, server_id: str, user_id: str | None, *, scoped: bool) -> McpServerData:
        async with self.db.read() as s:
            row = await s.get(McpServer, server_id)
            if row is None or (scoped and row.user_id != user_id):
                raise NotFound("mcp_server", server_id)
            return self._data(row)

    async def page(self, user_id: str | None, *, scoped: bool) -> list[McpServerData]:
        async with self.db.read() as s:
            q = select(McpServer).order_by(McpServer.created_at, McpServer.id)
            if scoped:
                q = q.where(McpServer.user_id == user_id)
            return [self._data(r) for r in await s.scalars(q)]

    async def tools(self, server_id: str) -> list[ToolData]:
        async with self.db.read() as s:
            q = select(Tool).where(Tool.mcp_server_id == server_id).order_by(Tool.name)
            return [ToolData.model_validate(r, from_attributes=True) for r in await s.scalars(q)]

    async def many(self, ids: set[str]) -> dict[str, McpServerData]:
        async with self.db.read() as s:
            rows = await s.scalars(select(McpServer).where(McpServer.id.in_(ids)))
            return {r.id: self._data(r) for r in rows}

    async def delete(self, server_id: str) -> None:
        """Delete the server and its tools (detached from every agent)."""
        async with self.db.write() as s:
            row = await s.get(McpServer, server_id)
            if row is None:
                raise NotFound("mcp_server", server_id)
            for t in await s.scalars(select(Tool).where(Tool.mcp_server_id == server_id)):
                await _detach(s, t)
            await s.execute(delete(Tool).where(Tool.mcp_server_id == server_id))
            await s.delete(row)


async def _detach(s: Any, tool: Tool) -> None:
    q = select(Agent).where(Agent.user_id == tool.user_id) if tool.user_id else select(Agent)
    for agent in await s.scalars(q.with_for_update()):
        if tool.name in (agent.tool_names or []):
            agent.tool_names = [n for n in agent.tool_names if n != tool.name]
            agent.updated_at = utcnow()
