"""MCP servers (Letta's `/v1/mcp-servers/`): register, list, change, refresh, delete; list,
retrieve and run their tools. A server's tools are listed when it is stored; one that does not
answer yet is stored without them, as Letta does (refresh lists them later; a refresh that
fails is a 502 / 504 and changes nothing). Secrets are stored encrypted and never returned in
full. stdio servers run inside the custom tools'
isolation and are refused (403) where it is unavailable."""

from __future__ import annotations

import logging
import shutil
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.tools.mcp_client import McpError, McpTimeout, McpToolDef
from agents.tools.mcp_tools import McpTools
from memory.mcp_servers import McpServerData, McpToolIn, SecretsUnavailable
from memory.models import NotFound
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.protocol.letta import _Body, custom_tool_json
from voice_gateway.routes.http import parse_body
from voice_gateway.tool_isolation import refuse_if_unisolated, refuse_stdio_outside

log = logging.getLogger(__name__)


class McpConfig(_Body):
    mcp_server_type: Literal["streamable_http", "sse", "stdio"] = "streamable_http"
    server_url: str | None = Field(None, max_length=2000)
    auth_header: str | None = Field(None, max_length=200)
    auth_token: str | None = Field(None, max_length=8000)
    custom_headers: dict[str, str] | None = None
    command: str | None = Field(None, max_length=1000)
    args: list[str] | None = Field(None, max_length=100)
    env: dict[str, str] | None = None
    voice_safe_tools: list[str] | None = Field(None, max_length=500)  # ours: voice-safe tools


class McpServerIn(_Body):
    server_name: str = Field(min_length=1, max_length=100)
    config: McpConfig


class McpServerPatch(_Body):
    server_name: str | None = Field(None, min_length=1, max_length=100)
    config: McpConfig | None = None


class ToolRunIn(_Body):
    args: dict[str, Any] = Field(default_factory=dict)


def _mask(value: str) -> str:
    return "****" + value[-4:] if len(value) > 8 else "****"


def server_json(s: McpServerData) -> dict[str, Any]:
    """Letta's server shape; secrets masked (the last 4 characters at most)."""
    sec = s.secrets
    out: dict[str, Any] = {
        "id": s.id,
        "server_name": s.server_name,
        "mcp_server_type": s.server_type,
    }
    if s.server_type == "stdio":
        env = {k: _mask(v) for k, v in (sec.get("env") or {}).items()}
        out |= {"command": s.command, "args": s.args, "env": env or None}
    else:
        headers = {k: _mask(v) for k, v in (sec.get("headers") or {}).items()}
        token = sec.get("token")
        out |= {
            "server_url": s.server_url,
            "auth_header": sec.get("auth_header") or ("Authorization" if token else None),
            "auth_token": _mask(token) if token else None,
            "custom_headers": headers or None,
        }
    out["voice_safe_tools"] = s.voice_safe_tools
    return out


def _mcp(request: Request) -> McpTools:
    mcp = gateway_of(request).loop.mcp
    if mcp is None:
        raise ApiError(503, "MCP servers are not available on this gateway")
    assert isinstance(mcp, McpTools)
    return mcp


def _fields(gw: Gateway, name: str, c: McpConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    if c.mcp_server_type == "stdio":
        if not c.command:
            raise ApiError(422, "config.command is required for a stdio MCP server")
        if shutil.which(c.command) is None:  # say so, rather than a 502 from a failed spawn
            raise ApiError(422, f"config.command: no such program: {c.command[:200]!r}")
        refuse_if_unisolated(gw)  # the command runs inside the tool isolation, or not at all
        refuse_stdio_outside(c.command, list(c.args or []), gw.settings.mcp_stdio_paths)
        fields = {"server_url": None, "command": c.command, "args": list(c.args or [])}
        secrets: dict[str, Any] = {"env": c.env}
    else:
        url = urlparse(c.server_url or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ApiError(422, "config.server_url must be an http(s) URL")
        fields = {"server_url": c.server_url, "command": None, "args": []}
        secrets = {
            "token": c.auth_token,
            "auth_header": c.auth_header if c.auth_token else None,
            "headers": c.custom_headers,
        }
    fields |= {
        "server_name": name,
        "server_type": c.mcp_server_type,
        "voice_safe_tools": list(c.voice_safe_tools or []),
    }
    return fields, secrets


async def _store(
    request: Request,
    fields: dict[str, Any],
    secrets: dict[str, Any],
    server_id: str | None,
    *,
    strict: bool = False,
) -> McpServerData:
    """Probe the server (its tools), then store it with them. A server that does not answer
    is stored all the same, without tools (a new one) or with those it had (a change), as
    Letta does; `strict` (refresh): a 502 / 504 and nothing changes."""
    gw, mcp = gateway_of(request), _mcp(request)
    p = await gw.auth.principal(request)
    trial = McpServerData(
        server_id or "probe",
        p.user_id,
        fields["server_name"],
        fields["server_type"],
        fields["server_url"],
        fields["command"],
        fields["args"],
        fields["voice_safe_tools"],
        None,  # type: ignore[arg-type]
        {k: v for k, v in secrets.items() if v},
    )
    try:
        mcp.store.seal(secrets)  # no key for secrets: refused before the server is contacted
    except SecretsUnavailable as exc:
        raise ApiError(503, str(exc)) from exc
    tools: list[McpToolDef] | None = None
    try:
        tools = await mcp.probe(trial)
    except (McpTimeout, McpError) as exc:
        if strict:
            raise ApiError(504 if isinstance(exc, McpTimeout) else 502, str(exc)) from exc
        log.warning("MCP server %r stored without listing its tools: %s", trial.server_name, exc)
    rows = None if tools is None else _tool_rows(tools)
    saved = await mcp.store.save(p.user_id, fields, secrets, rows, server_id)
    await mcp.pool.drop(saved.id)  # the next call opens a session with the new settings
    return saved


def _tool_rows(tools: list[McpToolDef]) -> list[McpToolIn]:
    return [McpToolIn(t.name, t.description, t.input_schema) for t in tools]


async def _server(request: Request) -> McpServerData:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    try:
        return await _mcp(request).store.get(
            request.path_params["server_id"], p.user_id, scoped=p.scoped
        )
    except SecretsUnavailable as exc:
        raise ApiError(503, str(exc)) from exc


async def create_server(request: Request) -> JSONResponse:
    """Register an MCP server (streamable HTTP, SSE or stdio); its tools are listed now."""
    body = await parse_body(request, McpServerIn)
    fields, secrets = _fields(gateway_of(request), body.server_name, body.config)
    return JSONResponse(server_json(await _store(request, fields, secrets, None)), 201)


async def list_servers(request: Request) -> JSONResponse:
    """Your MCP servers."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    servers = await _mcp(request).store.page(p.user_id, scoped=p.scoped)
    return JSONResponse([server_json(s) for s in servers])


async def get_server(request: Request) -> JSONResponse:
    """Retrieve an MCP server (secrets masked)."""
    return JSONResponse(server_json(await _server(request)))


async def update_server(request: Request) -> JSONResponse:
    """Change an MCP server (name, config); its tools are listed again."""
    old = await _server(request)
    body = await parse_body(request, McpServerPatch)
    name = body.server_name or old.server_name
    if body.config is None:
        fields = {
            "server_name": name,
            "server_type": old.server_type,
            "server_url": old.server_url,
            "command": old.command,
            "args": old.args,
            "voice_safe_tools": old.voice_safe_tools,
        }
        secrets = old.secrets
    else:
        fields, secrets = _fields(gateway_of(request), name, body.config)
    return JSONResponse(server_json(await _store(request, fields, secrets, old.id)))


async def refresh_server(request: Request) -> JSONResponse:
    """List the server's tools again: new ones are added, gone ones removed (and detached)."""
    old = await _server(request)
    before = {t.name for t in await _mcp(request).store.tools(old.id)}
    fields = {
        "server_name": old.server_name,
        "server_type": old.server_type,
        "server_url": old.server_url,
        "command": old.command,
        "args": old.args,
        "voice_safe_tools": old.voice_safe_tools,
    }
    saved = await _store(request, fields, old.secrets, old.id, strict=True)
    tools = await _mcp(request).store.tools(saved.id)
    now = {t.name for t in tools}
    return JSONResponse(
        {
            "id": saved.id,
            "tools_added": sorted(now - before),
            "tools_removed": sorted(before - now),
            "tools": [custom_tool_json(t) for t in tools],
        }
    )


async def delete_server(request: Request) -> JSONResponse:
    """Delete an MCP server and its tools (detached from every agent)."""
    s = await _server(request)
    mcp = _mcp(request)
    await mcp.store.delete(s.id)
    await mcp.pool.drop(s.id)
    return JSONResponse({"detail": f"MCP server {s.id} deleted"})


async def list_server_tools(request: Request) -> JSONResponse:
    """The server's tools (as stored at its last refresh)."""
    s = await _server(request)
    return JSONResponse([custom_tool_json(t) for t in await _mcp(request).store.tools(s.id)])


async def _tool(request: Request) -> tuple[McpServerData, Any]:
    s = await _server(request)
    tool_id = request.path_params["tool_id"]
    for t in await _mcp(request).store.tools(s.id):
        if tool_id in (t.id, t.name):
            return s, t
    raise NotFound("tool", tool_id)


async def get_server_tool(request: Request) -> JSONResponse:
    """One of the server's tools (by id or name)."""
    _, tool = await _tool(request)
    return JSONResponse(custom_tool_json(tool))


async def run_server_tool(request: Request) -> JSONResponse:
    """Run one of the server's tools (Letta's ToolExecutionResult); a server that fails or
    does not answer is an `error` result, not an HTTP error."""
    s, tool = await _tool(request)
    body = await parse_body(request, ToolRunIn)
    try:
        ok, text = await _mcp(request).run(s, tool.name, body.args)
    except McpError as exc:
        ok, text = False, str(exc)
    return JSONResponse(
        {"status": "success" if ok else "error", "func_return": text, "stdout": [], "stderr": []}
    )


def routes() -> list[BaseRoute]:
    base, one = "/v1/mcp-servers", "/v1/mcp-servers/{server_id}"
    return [
        Route(base, create_server, methods=["POST"]),
        Route(f"{base}/", create_server, methods=["POST"]),
        Route(base, list_servers, methods=["GET"]),
        Route(f"{base}/", list_servers, methods=["GET"]),
        Route(one, get_server, methods=["GET"]),
        Route(one, update_server, methods=["PATCH"]),
        Route(one, delete_server, methods=["DELETE"]),
        Route(f"{one}/refresh", refresh_server, methods=["PATCH"]),
        Route(f"{one}/tools", list_server_tools, methods=["GET"]),
        Route(f"{one}/tools/{{tool_id}}", get_server_tool, methods=["GET"]),
        Route(f"{one}/tools/{{tool_id}}/run", run_server_tool, methods=["POST"]),
    ]
