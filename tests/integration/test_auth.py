"""API keys: the server key, per-user keys with scoped agents, and the loopback rule."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from letta_client import AuthenticationError, Letta, NotFoundError

from memory.service import Memory
from voice_gateway.settings import Settings


def make_user(db_url: str, name: str) -> str:
    async def main() -> str:
        memory = await Memory.open(db_url)
        try:
            return (await memory.users.create(name))[1]
        finally:
            await memory.close()

    return asyncio.run(main())


def test_keys_and_scoping(gateway_factory, db_url: str) -> None:  # type: ignore[no-untyped-def]
    key_a, key_b = make_user(db_url, "alice"), make_user(db_url, "bob")
    srv = gateway_factory(database_url=db_url, api_key="server-secret")
    with httpx.Client(base_url=srv.url) as http:
        assert http.get("/v1/health/").status_code == 200  # public, as in Letta
        assert http.get("/v1/agents/").status_code == 401
        assert http.get("/v1/agents/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/v1/agents/", headers={"Authorization": "Basic abc"}).status_code == 401
        assert (
            http.get("/v1/health/", headers={"Authorization": "Bearer server-secret"}).status_code
            == 200
        )
    with pytest.raises(AuthenticationError):
        Letta(base_url=srv.url, api_key="wrong").agents.list()
    alice, bob = Letta(base_url=srv.url, api_key=key_a), Letta(base_url=srv.url, api_key=key_b)
    a1 = alice.agents.create(model="scripted/demo", name="alice's")
    b1 = bob.agents.create(model="scripted/demo", name="bob's")
    assert [a.id for a in alice.agents.list()] == [a1.id]
    assert [a.id for a in bob.agents.list()] == [b1.id]
    with pytest.raises(NotFoundError):
        bob.agents.retrieve(agent_id=a1.id)
    with pytest.raises(NotFoundError):
        bob.agents.messages.create(agent_id=a1.id, messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(NotFoundError):
        bob.agents.blocks.update("human", agent_id=a1.id, value="hacked")
    admin = Letta(base_url=srv.url, api_key="server-secret")
    assert {a1.id, b1.id} <= {a.id for a in admin.agents.list()}
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {key_b}"}) as http:
        r = http.post(
            "/v1/chat/completions",
            json={"model": a1.id, "messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_no_key_refuses_public_bind() -> None:
    with pytest.raises(SystemExit, match="VG_API_KEY"):
        Settings(host="0.0.0.0", api_key=None).check_bind_safety()
    Settings(host="0.0.0.0", api_key="k").check_bind_safety()
    Settings(host="127.0.0.1", api_key=None).check_bind_safety()


def test_users_cli_prints_a_key_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "VG_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/cli.db"}
    out = subprocess.run(
        [sys.executable, "-m", "voice_gateway.cli", "users", "create", "carol"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    assert data["api_key"].startswith("vgk-") and data["user_id"].startswith("user-")
    import sqlite3

    rows = (
        sqlite3.connect(f"{tmp_path}/cli.db").execute("select api_key_hash from users").fetchall()
    )
    assert rows and data["api_key"] not in rows[0][0]  # only the hash is stored
