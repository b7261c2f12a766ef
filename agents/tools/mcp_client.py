"""MCP servers over the official `mcp` SDK (2.x): one pooled client session per server.

As LiveKit's `MCPServer._run_client`: one task per server enters the transport and the
`ClientSession` and holds them open; list and call requests come from any task and share it.
A failed request (the server died, the network broke) drops the session and the next request
opens a new one. Every request has a time-out: a slow or dead server costs a clear `McpError`
(the loop gives it to the model as the tool's error), never a hung turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

log = logging.getLogger(__name__)
Transport = Literal["streamable_http", "sse", "stdio"]
CLOSE_WAIT_S = 3.0


class McpError(Exception):
    """An MCP server could not be reached or did not answer; the message says which and why."""


class McpTimeout(McpError):
    """The server did not answer in time."""


@dataclass(frozen=True, slots=True)
class McpSpec:
    """How to reach one server (secrets included: built from the store, never logged)."""

    server_id: str
    name: str
    kind: Transport
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True)
class McpToolDef:
    name: str
    description: str
    input_schema: dict[str, Any]


# stdio: the isolated command line, held for the server process's life (its scratch directory
# goes when the process has ended)
Launcher = Callable[[McpSpec], contextlib.AbstractAsyncContextManager[StdioServerParameters]]


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


@contextlib.asynccontextmanager
async def _stdio(
    launch: contextlib.AbstractAsyncContextManager[StdioServerParameters],
) -> AsyncIterator[Any]:
    """The server process inside its launch: stdio_client ends the process, then the launch's
    exit cleans up after it."""
    async with launch as params, stdio_client(params) as streams:
        yield streams


@dataclass(eq=False)
class McpConnection:
    spec: McpSpec
    launcher: Launcher | None = None
    connect_timeout_s: float = 10.0
    _session: ClientSession | None = None
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _error: str | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        s = self.spec
        if s.kind == "stdio":
            if self.launcher is None:
                raise McpError("stdio MCP servers need the tool sandbox, which is not available")
            return _stdio(self.launcher(s))
        if s.kind == "sse":
            return sse_client(str(s.url), headers=dict(s.headers), timeout=self.connect_timeout_s)
        return _streamable(str(s.url), dict(s.headers))

    async def _run(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                await session.initialize()
                self._session = session
                self._ready.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._error = _reason(exc)
            log.info("MCP server %s: session ended: %s", self.spec.name, self._error)
        finally:
            self._session = None
            self._ready.set()

    async def session(self) -> ClientSession:
        """The open session (opened now if there is none, within the connect time-out)."""
        async with self._lock:
            if self._session is not None and self._task is not None and not self._task.done():
                return self._session
            await self._reset()
            self._ready, self._stop, self._error = asyncio.Event(), asyncio.Event(), None
            self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    await self._ready.wait()
            except TimeoutError:
                await self._reset()
                raise McpTimeout(
                    f"MCP server '{self.spec.name}' did not answer within "
                    f"{self.connect_timeout_s:g}s"
                ) from None
            if self._session is None:
                raise McpError(f"MCP server '{self.spec.name}' is unreachable: {self._error}")
            return self._session

    async def list_tools(self, timeout_s: float) -> list[McpToolDef]:
        async def go() -> list[McpToolDef]:
            session = await self.session()
            result = await session.list_tools()
            return [
                McpToolDef(t.name, t.description or "", dict(t.input_schema or {}))
                for t in result.tools
            ]

        return await self._bounded(go(), timeout_s, "listing its tools")

    async def call(self, name: str, args: dict[str, Any], timeout_s: float) -> tuple[bool, str]:
        """(ok, text) of a tool call: the text parts of its content (is_error: not ok)."""

        async def go() -> tuple[bool, str]:
            session = await self.session()
            res = await session.call_tool(name, args)
            parts = getattr(res, "content", None) or []
            text = "\n".join(str(getattr(p, "text", "")) for p in parts if hasattr(p, "text"))
            if not text and getattr(res, "structured_content", None) is not None:
                text = str(res.structured_content)
            return not bool(getattr(res, "is_error", False)), text

        return await self._bounded(go(), timeout_s, f"running {name}")

    async def _bounded(self, coro: Any, timeout_s: float, what: str) -> Any:
        try:
            async with asyncio.timeout(timeout_s):
                return await coro
        except McpError:
            raise
        except TimeoutError:
            await self._reset()  # a server that hangs gets a fresh session next time
            raise McpTimeout(
                f"MCP server '{self.spec.name}' timed out after {timeout_s:g}s {what}"
            ) from None
        except Exception as exc:
            await self._reset()
            raise McpError(f"MCP server '{self.spec.name}' failed {what}: {_reason(exc)}") from exc

    async def _reset(self) -> None:
        task, self._task, self._session = self._task, None, None
        if task is None or task.done():
            return
        self._stop.set()
        done, _ = await asyncio.wait({task}, timeout=CLOSE_WAIT_S)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_WAIT_S)

    async def aclose(self) -> None:
        await self._reset()


@contextlib.asynccontextmanager
async def _streamable(url: str, headers: dict[str, str]) -> Any:
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


class McpPool:
    """One connection per server id; a changed spec (the server was edited) replaces it."""

    def __init__(self, launcher: Launcher | None = None, connect_timeout_s: float = 10.0) -> None:
        self.launcher = launcher
        self.connect_timeout_s = connect_timeout_s
        self.conns: dict[str, McpConnection] = {}

    async def get(self, spec: McpSpec) -> McpConnection:
        conn = self.conns.get(spec.server_id)
        if conn is not None and conn.spec == spec:
            return conn
        if conn is not None:
            await conn.aclose()
        conn = self.conns[spec.server_id] = McpConnection(
            spec, self.launcher, self.connect_timeout_s
        )
        return conn

    async def drop(self, server_id: str) -> None:
        conn = self.conns.pop(server_id, None)
        if conn is not None:
            await conn.aclose()

    async def aclose(self) -> None:
        for server_id in list(self.conns):
            await self.drop(server_id)
