"""A real MCP server built with the official `mcp` SDK (2.x `MCPServer`), for the tests:
served over streamable HTTP or SSE on loopback (in a thread), or over stdio (this file run as
a script: `python mcp_server.py`, as the gateway's isolated launcher starts it).

Tools: `get_weather(city)` (counts its calls in `CALLS`), `forecast(city)` (0.5 s),
`book_table(people)` and `slow()`
(sleeps longer than any test time-out). `Authorization` headers seen are kept in `AUTH`."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from mcp.server.mcpserver import MCPServer

CALLS: Counter[str] = Counter()
AUTH: list[str] = []


def build(name: str = "weather") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def get_weather(city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city name.
        """
        CALLS["get_weather"] += 1
        return f"It is sunny and 21 degrees in {city}."

    @server.tool()
    def book_table(people: int) -> str:
        """Book a table at the restaurant.

        Args:
            people: How many people.
        """
        CALLS["book_table"] += 1
        return f"table booked for {people}"

    @server.tool()
    def forecast(city: str) -> str:
        """Tomorrow's forecast for a city (a slow service: half a second).

        Args:
            city: The city name.
        """
        time.sleep(0.5)
        CALLS["forecast"] += 1
        return f"Tomorrow in {city}: light rain, 17 degrees."

    @server.tool()
    def slow() -> str:
        """Take a very long time."""
        time.sleep(60)
        return "late"

    return server


def http_app(kind: str = "streamable_http") -> Any:
    """The ASGI app (streamable HTTP at /mcp, or SSE at /sse), recording Authorization."""
    server = build()
    app = server.sse_app() if kind == "sse" else server.streamable_http_app()

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for k, v in scope.get("headers", []):
                if k == b"authorization":
                    AUTH.append(v.decode())
        await app(scope, receive, send)

    return recording


if __name__ == "__main__":
    build().run("stdio")
