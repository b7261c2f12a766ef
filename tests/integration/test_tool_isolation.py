"""Custom tools only where they can be isolated (SECURITY.md).

A real gateway process started where the kernel refuses network and mount namespaces
(tests/support/no_namespaces.py, as in a container that was not granted them) logs an error at
start, answers 403 with a JSON detail on tool creation, and refuses to run a stored tool;
VG_SANDBOX_ALLOW_WEAK=1 lets tools run there anyway. Where namespaces are available, the same
stored tool runs isolated (no network)."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.tools.sandbox import REQUIRED_LAYERS, Sandbox, SandboxConfig
from tests.integration.test_sandbox import os_allows_namespaces
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.gateway import running_gateway
from tests.support.gateway_proc import GatewayProcess, base_env
from tests.support.servers import ServerThread

DENY = [sys.executable, "-m", "tests.support.no_namespaces"]
TOOL = '''
import socket


def reach(port: int) -> str:
    """Try to reach a loopback port.

    Args:
        port: the port
    """
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError as exc:
        return f"blocked: {exc}"
    return "connected"
'''


async def test_without_namespaces_the_sandbox_refuses_unless_allowed() -> None:
    """Forced through the setting (VG_TOOL_NAMESPACES=false): no tool process is started."""
    box = Sandbox(SandboxConfig(namespaces=False))
    reason = await box.check_isolation()
    assert reason is not None and "no netns, mountns, minimal-root" in reason
    assert "namespaces are turned off" in reason
    res = await box.run("def f() -> str:\n    return 'ran'\n", "f", {})
    assert not res.ok and res.pid is None and res.error == f"f was not run: {reason}"
    weak = Sandbox(SandboxConfig(namespaces=False))
    assert await weak.check_isolation(allow_weak=True) == reason  # still reported
    res = await weak.run("def f() -> str:\n    return 'ran'\n", "f", {})
    assert res.ok and res.value == "ran" and "netns" not in res.layers


async def test_where_namespaces_exist_nothing_is_refused() -> None:
    if not os_allows_namespaces():
        pytest.skip("this machine does not allow network/mount namespaces")
    box = Sandbox()
    assert await box.check_isolation() is None and box.refusal is None
    res = await box.run("def f() -> str:\n    return 'ran'\n", "f", {})
    assert res.ok and set(REQUIRED_LAYERS) <= set(res.layers)


def test_in_process_gateway_refuses_tool_creation(tmp_path: Path) -> None:
    with running_gateway(f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}", tool_namespaces=False) as srv:
        resp = httpx.post(f"{srv.url}/v1/tools/", json={"source_code": TOOL}, timeout=30)
        assert resp.status_code == 403, resp.text
        assert "custom tools are disabled" in resp.json()["detail"]
        assert "VG_SANDBOX_ALLOW_WEAK=1" in resp.json()["detail"]
        assert httpx.get(f"{srv.url}/v1/tools/", timeout=30).status_code == 200


@pytest.fixture
def llm() -> Iterator[tuple[FakeLLM, ServerThread]]:
    fake = FakeLLM()
    srv = ServerThread(fake.app).start()
    try:
        yield fake, srv
    finally:
        srv.stop()


@pytest.fixture
def port() -> Iterator[int]:
    """A loopback listener a tool tries to reach."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        yield srv.getsockname()[1]


def run_tool_turn(gw: GatewayProcess, fake: FakeLLM, agent_id: str, port: int) -> dict[str, Any]:
    fake.push(Reply(tool_calls=[ToolCallSpec("reach", {"port": port})]), Reply(text="Done."))
    resp = httpx.post(
        f"{gw.url}/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": "reach it"}]},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    ret = next(m for m in resp.json()["messages"] if m["message_type"] == "tool_return_message")
    return dict(ret)


def test_gateway_process_where_namespaces_are_denied(
    tmp_path: Path, llm: tuple[FakeLLM, ServerThread], port: int
) -> None:
    if os.geteuid() != 0:
        pytest.skip("denying namespaces to a child (tests/support/no_namespaces.py) needs root")
    fake, llm_srv = llm
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_VOICE="false",
        OPENAI_BASE_URL=f"{llm_srv.url}/v1",
        OPENAI_API_KEY="test",
    )

    def start(name: str, wrap: list[str], **extra: str) -> GatewayProcess:
        return GatewayProcess({**env, **extra}, tmp_path / f"{name}.log", wrap=wrap).start()

    gw = start("denied", DENY)
    try:
        resp = httpx.post(f"{gw.url}/v1/tools/", json={"source_code": TOOL}, timeout=30)
        assert resp.status_code == 403, resp.text
        detail = resp.json()["detail"]
        assert "cannot be isolated here: no netns, mountns, minimal-root" in detail, detail
        assert "No space left on device" in detail and "VG_SANDBOX_ALLOW_WEAK=1" in detail
        assert "ERROR" in gw.log() and "custom tools are disabled" in gw.log()
    finally:
        gw.stop()

    gw = start("weak", DENY, VG_SANDBOX_ALLOW_WEAK="1")
    try:
        assert "running them anyway because VG_SANDBOX_ALLOW_WEAK=1" in gw.log()
        resp = httpx.post(f"{gw.url}/v1/tools/", json={"source_code": TOOL}, timeout=30)
        assert resp.status_code == 201, resp.text
        tool_id = resp.json()["id"]
        agent = httpx.post(
            f"{gw.url}/v1/agents/",
            json={"name": "reacher", "model": "openai/fake", "include_base_tools": False},
            timeout=30,
        ).json()
        url = f"{gw.url}/v1/agents/{agent['id']}/tools/attach/{tool_id}"
        assert httpx.patch(url, timeout=30).status_code == 200
        ret = run_tool_turn(gw, fake, agent["id"], port)
        # it ran (no netns: the audit hook is the only guard against sockets)
        assert "was not run" not in ret["tool_return"], ret
        assert "socket.connect is not allowed" in ret["tool_return"], ret
    finally:
        gw.stop()

    gw = start("denied-again", DENY)  # the stored tool is not run
    try:
        ret = run_tool_turn(gw, fake, agent["id"], port)
        assert ret["status"] == "error" and "reach was not run" in ret["tool_return"], ret
    finally:
        gw.stop()

    if not os_allows_namespaces():
        return
    gw = start("isolated", [])
    try:
        assert "custom tools: isolated" in gw.log()
        ret = run_tool_turn(gw, fake, agent["id"], port)
        assert "was not run" not in ret["tool_return"], ret
        assert "socket.connect is not allowed" in ret["tool_return"], ret
    finally:
        gw.stop()
