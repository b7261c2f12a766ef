"""Cost of an MCP tool call (agents/tools/mcp_client.py), on loopback.

A server built with the official `mcp` SDK (`MCPServer`, one trivial tool) runs in this
process's thread under uvicorn (streamable HTTP), and as a stdio child inside the tool
isolation (agents/tools/mcp_jail.py). Measured, one call at a time:
- pooled_http: a call over the pooled session (what the loop does after the first call);
- fresh_http: connect + initialize + call + close per call (what pooling saves);
- pooled_stdio: a call over the pooled session to the isolated stdio server;
- first_stdio: spawn (isolated) + initialize + the first call.
200 calls pooled, 30 fresh (--quick: 50 and 10).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import uvicorn
from _common import Timer, emit, parser, summary
from mcp.server.mcpserver import MCPServer

from agents.tools.mcp_client import McpConnection, McpSpec
from agents.tools.mcp_tools import jailed_launcher

SERVER = '''
from mcp.server.mcpserver import MCPServer
s = MCPServer("bench")

@s.tool()
def echo(text: str) -> str:
    """Echo."""
    return text

s.run("stdio")
'''


def http_server() -> tuple[uvicorn.Server, int]:
    mcp = MCPServer("bench")

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo."""
        return text

    config = uvicorn.Config(mcp.streamable_http_app(), host="127.0.0.1", port=0, log_level="error")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, port


async def pooled(spec: McpSpec, n: int) -> dict[str, float | int]:
    conn = McpConnection(spec, jailed_launcher(strict=False), 10.0)
    await conn.call("echo", {"text": "warm"}, 10.0)
    samples = []
    for i in range(n):
        with Timer() as t:
            ok, text = await conn.call("echo", {"text": str(i)}, 10.0)
        assert ok and text == str(i), text
        samples.append(t.ms)
    await conn.aclose()
    return summary(samples)


async def fresh(spec: McpSpec, n: int) -> dict[str, float | int]:
    samples = []
    for i in range(n):
        with Timer() as t:
            conn = McpConnection(spec, jailed_launcher(strict=False), 10.0)
            ok, _ = await conn.call("echo", {"text": str(i)}, 10.0)
            await conn.aclose()
        assert ok
        samples.append(t.ms)
    return summary(samples)


async def main() -> None:
    args = parser(__doc__ or "").parse_args()
    n, m = (50, 10) if args.quick else (200, 30)
    server, port = http_server()
    http = McpSpec("s1", "bench", "streamable_http", f"http://127.0.0.1:{port}/mcp")
    stdio = McpSpec("s2", "bench-stdio", "stdio", command=sys.executable, args=("-c", SERVER))
    try:
        result = {
            "calls": n,
            "pooled_http": await pooled(http, n),
            "fresh_http": await fresh(http, m),
            "pooled_stdio": await pooled(stdio, n),
            "first_stdio": await fresh(stdio, max(3, m // 3)),
        }
    finally:
        server.should_exit = True
    emit("mcp_tool_call", result)


if __name__ == "__main__":
    asyncio.run(main())
