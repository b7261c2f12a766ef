"""The stdio MCP launcher's scratch directory (`vg-mcp-*`) lives as long as its server process:
a real stdio server from the `mcp` SDK (tests/support/mcp_server.py) started by the gateway's
launcher (the tool isolation's layers that this host has), its scratch directory removed when
the session is closed, and when the process was killed (the failed call that finds it dead)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters

from agents.tools.mcp_client import McpConnection, McpError, McpSpec
from agents.tools.mcp_tools import SCRATCH_PREFIX, jailed_launcher
from tests.support import mcp_server


class Recording:
    """The gateway's launcher, noting each scratch directory it hands out."""

    def __init__(self) -> None:
        self.inner = jailed_launcher(strict=False)
        self.scratches: list[Path] = []

    @contextlib.asynccontextmanager
    async def __call__(self, spec: McpSpec) -> AsyncIterator[StdioServerParameters]:
        async with self.inner(spec) as params:
            assert params.cwd is not None
            self.scratches.append(Path(params.cwd))
            yield params


def stdio_spec(marker: str) -> McpSpec:
    source = Path(mcp_server.__file__).read_text()
    return McpSpec(
        "mcp-test", "stdio-weather", "stdio", command=sys.executable, args=("-c", source, marker)
    )


def pids_with(marker: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmd and b"-c" in cmd:
            out.append(int(entry.name))
    return out


async def test_scratch_removed_when_the_session_closes() -> None:
    launcher = Recording()
    conn = McpConnection(stdio_spec(f"m-{uuid.uuid4().hex}"), launcher, 20.0)
    try:
        ok, text = await conn.call("get_weather", {"city": "Oslo"}, 20.0)
        assert ok and "Oslo" in text
        [scratch] = launcher.scratches
        assert scratch.name.startswith(SCRATCH_PREFIX) and scratch.is_dir()
    finally:
        await conn.aclose()
    assert not scratch.exists()


async def test_scratch_removed_when_the_server_process_is_killed() -> None:
    marker = f"m-{uuid.uuid4().hex}"
    launcher = Recording()
    conn = McpConnection(stdio_spec(marker), launcher, 20.0)
    try:
        ok, _ = await conn.call("get_weather", {"city": "Oslo"}, 20.0)
        assert ok
        [scratch] = launcher.scratches
        assert scratch.is_dir()
        pids = pids_with(marker)
        assert pids, "the stdio server process was not found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(McpError):
            await conn.call("get_weather", {"city": "Oslo"}, 5.0)
        assert not scratch.exists()
        # the next call starts a new process in a new scratch directory
        ok, text = await conn.call("get_weather", {"city": "Rome"}, 20.0)
        assert ok and "Rome" in text
        assert len(launcher.scratches) == 2 and launcher.scratches[1].is_dir()
    finally:
        await conn.aclose()
    assert not any(s.exists() for s in launcher.scratches)
