"""MCP tools as loop `Tool`s (like `custom_tool`): voice-safe when the operator marks them, so
`ToolRegistry.select(voice=True)` and the `pre_exec_msg` filler apply unchanged. A call goes
over the server's pooled session with a time-out; an unreachable, slow or failing server is a
`ToolError` the model reads, and the turn (the call) goes on."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

from agents.tools.mcp_client import (
    Launcher,
    McpConnection,
    McpError,
    McpPool,
    McpSpec,
    McpToolDef,
)
from agents.tools.registry import Tool, ToolContext, ToolError
from memory.mcp_servers import McpServerData, McpServerStore
from memory.tools import ToolData

JAIL = str(Path(__file__).with_name("mcp_jail.py"))
NOBODY = 65534


def spec_of(server: McpServerData) -> McpSpec:
    """How to reach a stored server: Letta's auth_header / auth_token become a header (a bare
    token under Authorization is sent as a bearer token)."""
    sec = server.secrets
    headers = dict(sec.get("headers") or {})
    token = sec.get("token")
    if token:
        name = sec.get("auth_header") or "Authorization"
        is_bare = name.lower() == "authorization" and " " not in token
        headers[name] = f"Bearer {token}" if is_bare else token
    return McpSpec(
        server.id,
        server.server_name,
        server.server_type,  # type: ignore[arg-type]
        server.server_url,
        tuple(sorted(headers.items())),
        server.command,
        tuple(server.args),
        tuple(sorted((sec.get("env") or {}).items())),
    )


SCRATCH_PREFIX = "vg-mcp-"


def jailed_launcher(
    strict: bool, memory_mb: int = 512, read_dirs: tuple[str, ...] = ()
) -> Launcher:
    """stdio commands run inside the tool sandbox's isolation (agents/tools/mcp_jail.py), each
    server process in a scratch directory of its own, removed when the process has ended;
    `read_dirs` are shown to it read-only (VG_MCP_STDIO_DIRS)."""

    @contextlib.asynccontextmanager
    async def launch(spec: McpSpec) -> AsyncIterator[StdioServerParameters]:
        scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        try:
            if os.geteuid() == 0:
                os.chown(scratch, NOBODY, NOBODY)
            args = ["-I", "-B", JAIL, scratch, "1" if strict else "0", str(memory_mb)]
            args.append(":".join(read_dirs))
            env = {"HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8", **dict(spec.env)}
            yield StdioServerParameters(
                command=sys.executable,
                args=[*args, str(spec.command), *spec.args],
                env=env,
                cwd=scratch,
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    return launch


class McpTools:
    def __init__(
        self,
        store: McpServerStore,
        pool: McpPool,
        call_timeout_s: float = 10.0,
    ) -> None:
        self.store = store
        self.pool = pool
        self.call_timeout_s = call_timeout_s

    async def probe(self, server: McpServerData) -> list[McpToolDef]:
        """The server's tools, over a connection of its own (create / refresh: the pooled
        session, if any, is replaced after the change is stored)."""
        conn = McpConnection(spec_of(server), self.pool.launcher, self.pool.connect_timeout_s)
        try:
            return await conn.list_tools(self.call_timeout_s)
        finally:
            await conn.aclose()

    async def run(self, server: McpServerData, name: str, args: dict[str, Any]) -> tuple[bool, str]:
        conn = await self.pool.get(spec_of(server))
        return await conn.call(name, args, self.call_timeout_s)

    async def tools(self, rows: list[ToolData]) -> list[Tool]:
        servers = await self.store.many({str(r.mcp_server_id) for r in rows})
        return [self._tool(r, servers.get(str(r.mcp_server_id))) for r in rows]

    def _tool(self, data: ToolData, server: McpServerData | None) -> Tool:
        name = data.name

        async def call(ctx: ToolContext, **kwargs: Any) -> str:
            if server is None:
                raise ToolError(f"the MCP server of {name} was removed")
            try:
                ok, text = await self.run(server, name, kwargs)
            except McpError as exc:
                raise ToolError(f"Error executing function {name}: {exc}") from exc
            if not ok:
                raise ToolError(f"Error executing function {name}: {text}")
            return text

        params = (data.json_schema or {}).get("parameters") or {}
        return Tool(
            name=name,
            fn=call,
            description=data.description or "",
            parameters={
                "type": "object",
                "properties": dict(params.get("properties") or {}),
                "required": list(params.get("required") or []),
            },
            voice_safe=data.voice_safe,
            tags=list(data.tags),
            return_char_limit=data.return_char_limit,
        )
