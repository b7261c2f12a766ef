"""MCP servers through the official letta-client SDK against a live gateway, with real MCP
servers from the `mcp` SDK (tests/support/mcp_server.py) over streamable HTTP, SSE and stdio
(inside the tool isolation): registered, listed, refreshed, their tools run directly and by the
one agent loop, a dead server a tool error. A server that does not answer yet is stored without
tools (its refresh a 502/504); a stdio server where isolation is unavailable (403) or whose
program lies outside the directories it may read (422); secrets stored encrypted under the key
file made on the first start, and never returned in full."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from letta_client import APIStatusError, Letta, PermissionDeniedError

from tests.support import mcp_server
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.gateway import make_settings
from tests.support.servers import ServerThread
from voice_gateway.app import create_app
from voice_gateway.secrets_key import SecretsKeyError

TOKEN = "s3cret-token-abcdef-1234"


@pytest.fixture(scope="module")
def mcp_http() -> Iterator[ServerThread]:
    srv = ServerThread(mcp_server.http_app()).start()
    yield srv
    srv.stop()


@pytest.fixture
def srv(gateway_factory, tmp_path: Path, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}",
        openai_base_url=fake_llm_url,
        openai_api_key="test",
        secrets_key="k" * 40,
        mcp_timeout_s=2.0,
        mcp_connect_timeout_s=2.0,
    )


@pytest.fixture
def client(srv: ServerThread) -> Letta:
    return Letta(
        base_url=srv.url,
        api_key="any-key-on-loopback",
        timeout=60,
        _strict_response_validation=True,
    )


def http_config(url: str, **extra: Any) -> dict[str, Any]:
    return {"mcp_server_type": "streamable_http", "server_url": url, **extra}


def test_register_list_run_and_secrets(
    client: Letta, srv: ServerThread, mcp_http: ServerThread, tmp_path: Path
) -> None:
    server = client.mcp_servers.create(
        server_name="weather",
        config=http_config(  # type: ignore[arg-type]
            f"{mcp_http.url}/mcp", auth_token=TOKEN, voice_safe_tools=["get_weather"]
        ),
    )
    assert server.server_name == "weather" and server.id
    assert server.auth_token == "****1234"  # type: ignore[union-attr]
    assert f"Bearer {TOKEN}" in mcp_server.AUTH  # the token reached the server
    tools = client.mcp_servers.tools.list(server.id)
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"get_weather", "forecast", "book_table", "slow"}
    assert by_name["get_weather"].tool_type == "external_mcp"
    assert by_name["get_weather"].json_schema["parameters"]["required"] == ["city"]  # type: ignore[index]
    assert by_name["get_weather"].metadata["voice_safe"] is True  # type: ignore[index]
    assert by_name["book_table"].metadata["voice_safe"] is False  # type: ignore[index]
    before = mcp_server.CALLS["get_weather"]
    res = client.mcp_servers.tools.run(
        by_name["get_weather"].id, mcp_server_id=server.id, args={"city": "Oslo"}
    )
    assert res.status == "success" and "Oslo" in str(res.func_return)
    assert mcp_server.CALLS["get_weather"] == before + 1
    got = client.mcp_servers.retrieve(server.id)
    assert got.auth_token == "****1234"  # type: ignore[union-attr]
    assert [s.id for s in client.mcp_servers.list()] == [server.id]
    # at rest: the token is nowhere in the database file in clear
    db = sqlite3.connect(str(tmp_path / "gw.db"))
    sealed = db.execute("SELECT secrets FROM mcp_servers").fetchone()[0]
    assert TOKEN not in sealed and "Bearer" not in sealed
    assert TOKEN.encode() not in (tmp_path / "gw.db").read_bytes()
    refreshed = httpx.patch(f"{srv.url}/v1/mcp-servers/{server.id}/refresh").json()
    assert refreshed["tools_added"] == [] and len(refreshed["tools"]) == 4
    client.mcp_servers.delete(server.id)
    assert client.mcp_servers.list() == []
    assert not [t for t in client.tools.list() if t.tool_type == "external_mcp"]


def test_agent_calls_an_mcp_tool(client: Letta, mcp_http: ServerThread, fake_llm: FakeLLM) -> None:
    server = client.mcp_servers.create(
        server_name="weather",
        config=http_config(f"{mcp_http.url}/mcp"),  # type: ignore[arg-type]
    )
    tool = next(t for t in client.mcp_servers.tools.list(server.id) if t.name == "get_weather")
    agent = client.agents.create(model="openai/fake", include_base_tools=False)
    client.agents.tools.attach(tool.id, agent_id=agent.id)
    fake_llm.push(
        Reply(tool_calls=[ToolCallSpec("get_weather", {"city": "Lisbon"})]),
        Reply(text="Sunny in Lisbon."),
    )
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "weather in Lisbon?"}]
    )
    ret = [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert [(m.status, m.tool_return) for m in ret] == [  # type: ignore[union-attr]
        ("success", "It is sunny and 21 degrees in Lisbon.")
    ]
    # a slow tool: the time-out is the model's tool error, the turn goes on
    slow = next(t for t in client.mcp_servers.tools.list(server.id) if t.name == "slow")
    client.agents.tools.attach(slow.id, agent_id=agent.id)
    fake_llm.push(Reply(tool_calls=[ToolCallSpec("slow", {})]), Reply(text="It took too long."))
    resp = client.agents.messages.create(
        agent_id=agent.id, messages=[{"role": "user", "content": "do the slow thing"}]
    )
    ret = [m for m in resp.messages if m.message_type == "tool_return_message"]
    assert ret[0].status == "error" and "timed out after 2s" in str(ret[0].tool_return)  # type: ignore[union-attr]
    assert resp.stop_reason.stop_reason == "end_turn"


def test_sse_transport(client: Letta) -> None:
    sse = ServerThread(mcp_server.http_app("sse")).start()
    try:
        server = client.mcp_servers.create(
            server_name="sse-weather",
            config={"mcp_server_type": "sse", "server_url": f"{sse.url}/sse"},  # type: ignore[arg-type]
        )
        tools = {t.name: t for t in client.mcp_servers.tools.list(server.id)}
        res = client.mcp_servers.tools.run(
            tools["get_weather"].id, mcp_server_id=server.id, args={"city": "Rome"}
        )
        assert res.status == "success" and "Rome" in str(res.func_return)
    finally:
        sse.stop()


def test_stdio_server_runs_isolated(gateway_factory, tmp_path: Path, fake_llm_url: str) -> None:  # type: ignore[no-untyped-def]
    # the default time-outs (8 s), not the 2 s the other tests use to see time-outs sooner: a
    # stdio server starts two Python processes (the jail, then the server importing the `mcp`
    # SDK), which took more than 2 s on a loaded 2-vCPU CI machine
    gw = gateway_factory(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}",
        openai_base_url=fake_llm_url,
        openai_api_key="test",
    )
    client = Letta(base_url=gw.url, api_key="k", timeout=60, _strict_response_validation=True)
    source = Path(mcp_server.__file__).read_text()
    server = client.mcp_servers.create(
        server_name="stdio-weather",
        config={"mcp_server_type": "stdio", "command": sys.executable, "args": ["-c", source]},  # type: ignore[arg-type]
    )
    tools = {t.name: t for t in client.mcp_servers.tools.list(server.id)}
    assert set(tools) == {"get_weather", "forecast", "book_table", "slow"}
    res = client.mcp_servers.tools.run(
        tools["get_weather"].id, mcp_server_id=server.id, args={"city": "Kyiv"}
    )
    assert res.status == "success" and "Kyiv" in str(res.func_return), res.func_return


def test_stdio_server_from_a_directory_the_operator_names(gateway_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A server script in a directory of the user's own runs (isolated, reading it read-only)
    once VG_MCP_STDIO_DIRS names the directory; without it the creation is a 422."""
    home = Path(tempfile.mkdtemp(prefix="vg-mcp-home-"))  # readable by `nobody`, as a home
    try:
        home.chmod(0o755)
        script = home / "weather_server.py"
        script.write_text(Path(mcp_server.__file__).read_text())
        script.chmod(0o644)
        config = {"mcp_server_type": "stdio", "command": sys.executable, "args": [str(script)]}
        db = f"sqlite+aiosqlite:///{tmp_path / 'gw.db'}"
        gw = gateway_factory(database_url=db, mcp_stdio_dirs=str(home))
        client = Letta(base_url=gw.url, api_key="k", timeout=60, _strict_response_validation=True)
        server = client.mcp_servers.create(server_name="home-weather", config=config)  # type: ignore[arg-type]
        tools = {t.name: t for t in client.mcp_servers.tools.list(server.id)}
        assert set(tools) == {"get_weather", "forecast", "book_table", "slow"}
        res = client.mcp_servers.tools.run(
            tools["get_weather"].id, mcp_server_id=server.id, args={"city": "Lviv"}
        )
        assert res.status == "success" and "Lviv" in str(res.func_return), res.func_return
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _silent_server() -> tuple[socket.socket, int]:
    """Accepts connections and never answers (a server that times out)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(s.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return s, s.getsockname()[1]


def test_unreachable_servers_are_stored_without_tools(
    client: Letta, srv: ServerThread, tmp_path: Path
) -> None:
    """As Letta: a server that does not answer yet is stored (no tools); a refresh that fails
    is a 502 / 504 and changes nothing; a URL that is no http(s) URL is a 422, nothing stored."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    a = client.mcp_servers.create(
        server_name="a", config=http_config(f"http://127.0.0.1:{port}/mcp")
    )  # type: ignore[arg-type]
    assert client.mcp_servers.tools.list(a.id) == []
    with pytest.raises(APIStatusError) as refused:
        client.mcp_servers.refresh(a.id)
    assert refused.value.status_code == 502 and "unreachable" in str(refused.value)
    silent, sport = _silent_server()
    try:
        b = client.mcp_servers.create(
            server_name="b", config=http_config(f"http://127.0.0.1:{sport}/mcp")
        )  # type: ignore[arg-type]
        with pytest.raises(APIStatusError) as slow:
            client.mcp_servers.refresh(b.id)
        assert slow.value.status_code == 504
    finally:
        silent.close()
    c = client.mcp_servers.create(server_name="c", config=http_config(f"{srv.url}/v1/health"))  # type: ignore[arg-type]
    with pytest.raises(APIStatusError) as other:  # a web server that is no MCP server
        client.mcp_servers.refresh(c.id)
    assert other.value.status_code == 502
    bad = httpx.post(
        f"{srv.url}/v1/mcp-servers/",
        json={
            "server_name": "d",
            "config": {"mcp_server_type": "streamable_http", "server_url": "ftp://x"},
        },
    )
    assert bad.status_code == 422 and "http(s) URL" in bad.json()["detail"]
    script = tmp_path / "server.py"  # the isolation would not show it (no VG_MCP_STDIO_DIRS)
    script.write_text("print('hi')\n")
    stdio = {"mcp_server_type": "stdio", "command": sys.executable, "args": [str(script)]}
    outside = httpx.post(f"{srv.url}/v1/mcp-servers/", json={"server_name": "e", "config": stdio})
    assert outside.status_code == 422, outside.text
    assert (
        str(script) in outside.json()["detail"] and "VG_MCP_STDIO_DIRS" in outside.json()["detail"]
    )
    assert sorted(x.server_name for x in client.mcp_servers.list()) == ["a", "b", "c"]  # type: ignore[union-attr]
    assert not [t for t in client.tools.list() if t.tool_type == "external_mcp"]


def test_refresh_of_a_dead_server_keeps_what_was_stored(client: Letta) -> None:
    srv = ServerThread(mcp_server.http_app()).start()
    server = client.mcp_servers.create(server_name="w", config=http_config(f"{srv.url}/mcp"))  # type: ignore[arg-type]
    srv.stop()
    with pytest.raises(APIStatusError) as dead:
        client.mcp_servers.refresh(server.id)
    assert dead.value.status_code in (502, 504)
    assert len(client.mcp_servers.tools.list(server.id)) == 4


def test_secrets_key_file_and_stdio_needs_isolation(
    gateway_factory, tmp_path: Path, mcp_http: ServerThread
) -> None:  # type: ignore[no-untyped-def]
    """Without VG_SECRETS_KEY the first start makes a key file beside the database (owner-only)
    and secrets are stored; the next start reads them with the same key; a corrupt key file
    stops the start naming the file, and nothing replaces it."""
    db = f"sqlite+aiosqlite:///{tmp_path / 'nokey.db'}"
    key_file = tmp_path / "secrets.key"
    gw = gateway_factory(database_url=db, tool_namespaces=False)
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = key_file.read_text()
    c = Letta(base_url=gw.url, api_key="k", timeout=30, _strict_response_validation=True)
    server = c.mcp_servers.create(
        server_name="w", config=http_config(f"{mcp_http.url}/mcp", auth_token=TOKEN)
    )  # type: ignore[arg-type]
    assert len(c.mcp_servers.tools.list(server.id)) == 4  # the token reached the server
    with pytest.raises(PermissionDeniedError, match="custom tools are disabled"):
        c.mcp_servers.create(
            server_name="s",
            config={"mcp_server_type": "stdio", "command": sys.executable, "args": ["-V"]},  # type: ignore[arg-type]
        )
    gw.stop()
    again = gateway_factory(database_url=db, tool_namespaces=False)
    c2 = Letta(base_url=again.url, api_key="k", timeout=30, _strict_response_validation=True)
    kept = c2.mcp_servers.retrieve(server.id)
    assert kept.auth_token == "****" + TOKEN[-4:]  # type: ignore[union-attr]
    c2.mcp_servers.refresh(server.id)  # unsealed with the kept key: the server answers
    again.stop()
    assert key_file.read_text() == key
    key_file.write_text("not a key\n")
    with pytest.raises(SecretsKeyError, match="does not hold a key") as corrupt:
        asyncio.run(start_once(db))
    assert str(key_file) in str(corrupt.value)
    assert key_file.read_text() == "not a key\n"  # never silently replaced
    key_file.chmod(0)
    if os.geteuid() != 0:  # root reads any file
        with pytest.raises(SecretsKeyError, match="cannot be read"):
            asyncio.run(start_once(db))


async def start_once(db: str) -> None:
    """The gateway's start-up (its lifespan) and shut-down, without serving."""
    app = create_app(make_settings(db, tool_namespaces=False))
    async with app.router.lifespan_context(app):
        pass
