"""Security against a live keyed gateway: every route and both sockets refuse callers without
a key; users cannot see each other's data; session tokens are short-lived and bound to one
agent and user; browser Origins are checked; secrets never reach the logs."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from tests.support.fake_llm import FakeLLM
from tests.support.gateway import running_gateway
from tests.support.gateway_proc import GatewayProcess, base_env, vg_command
from tests.support.servers import ServerThread
from tests.support.voice_client import VoiceClient
from voice_gateway.auth import Principal
from voice_gateway.origins import OriginPolicy
from voice_gateway.settings import Settings

ADMIN = "admin-key-0123456789-secret"
OPENAI_KEY = "sk-test-openai-key-0123456789abcdef"
MEDIA_PATH = "/v1/telephony/twilio/media"
# Routes open without a key, each for a documented reason (docs/operations.md, "Security"):
# probes (Letta's /v1/health/ included), the public API description, and the Twilio webhook
# and status callback (they check X-Twilio-Signature).
PUBLIC = {
    "/health",
    "/health/",
    "/ready",
    "/openapi.json",
    "/v1/health",
    "/v1/health/",
    "/v1/telephony/twilio/voice",
    "/v1/telephony/twilio/status",
    # a live WebRTC call's URL is its own credential (144 random bits, handed only to the
    # offerer: docs/webrtc.md); the offer route itself authenticates (checked below)
    "/v1/agents/{agent_id}/webrtc/{call_id}",
}


@dataclass
class Keyed:
    server: ServerThread
    users: dict[str, tuple[str, str]]  # name -> (user_id, key)
    agents: dict[str, str] = field(default_factory=dict)  # key -> that caller's agent

    def agent(self, key: str) -> str:
        """One agent per key (created on first use)."""
        if key not in self.agents:
            self.agents[key] = new_agent(self, key)
        return self.agents[key]

    @property
    def url(self) -> str:
        return self.server.url

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def ws(self, agent_id: str, query: str = "") -> str:
        return f"{self.server.ws_url}/v1/agents/{agent_id}/voice{query}"


def create_user(database_url: str, name: str) -> tuple[str, str]:
    env = base_env(VG_DATABASE_URL=database_url)
    out = subprocess.run(
        [*vg_command("users", "create", name)], env=env, capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    return data["user_id"], data["api_key"]


@pytest.fixture(scope="module")
def keyed(
    tmp_path_factory: pytest.TempPathFactory, fake_llm_server: tuple[FakeLLM, ServerThread]
) -> Iterator[Keyed]:
    db = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('security') / 'vg.db'}"
    users = {name: create_user(db, name) for name in ("alice", "bob")}
    with running_gateway(
        db,
        api_key=ADMIN,
        voice=True,
        stt="openai",  # no audio in these tests: spare loading whisper
        openai_api_key=OPENAI_KEY,
        openai_base_url=f"{fake_llm_server[1].url}/v1",
        twilio_auth_token="twilio-token-for-tests",
        # the route walks send hundreds of refused requests in a burst: a limit out of the way
        # (the rate limits have their own tests: test_rate_limits.py, test_hardened_edges.py)
        rate_limit_rps=1000,
        rate_limit_burst=5000,
    ) as srv:
        yield Keyed(srv, users)


def flatten(routes: list[BaseRoute], prefix: str = "") -> Iterator[tuple[str, BaseRoute]]:
    for route in routes:
        if isinstance(route, Mount) and not isinstance(route.app, StaticFiles):
            yield from flatten(list(route.routes), prefix + route.path)
        else:
            yield prefix + getattr(route, "path", ""), route


def concrete(path: str) -> str:
    return re.sub(r"{[^}]+}", "x-nothing-here", path)


def test_every_route_needs_a_key(keyed: Keyed) -> None:
    app = keyed.server.app
    checked: list[str] = []
    with keyed.http() as anon, keyed.http("not-a-key") as wrong:
        for path, route in flatten(list(app.routes)):
            if isinstance(route, Mount):  # the static web client: public files
                assert isinstance(route.app, StaticFiles)
                continue
            if not isinstance(route, Route) or path in PUBLIC:
                continue
            for method in sorted((route.methods or set()) - {"HEAD"}):
                body: dict[str, Any] | None = {} if method in ("POST", "PUT", "PATCH") else None
                for client in (anon, wrong):
                    r = client.request(method, concrete(path), json=body)
                    assert r.status_code == 401, (method, path, r.status_code, r.text)
                    body_ = r.json()  # the OpenAI-compatible route answers in OpenAI's shape
                    assert body_.get("detail") or body_["error"]["code"] == "invalid_api_key"
                checked.append(f"{method} {path}")
        # the public ones are public on purpose; the webhook wants Twilio's signature
        assert anon.get("/health/").status_code == 200
        assert anon.get("/v1/health/").status_code == 200
        assert anon.post("/v1/telephony/twilio/voice", data={"CallSid": "CA1"}).status_code == 403
        assert anon.post("/v1/telephony/twilio/status", data={"CallSid": "CA1"}).status_code == 403
    assert len(checked) >= 25, checked
    sockets = [p for p, r in flatten(list(app.routes)) if isinstance(r, WebSocketRoute)]
    assert MEDIA_PATH in sockets and "/v1/agents/{agent_id}/voice" in sockets
    for path in sockets:
        assert asyncio.run(socket_close_code(keyed, path)) == 4401, path
    print(f"checked {len(checked)} route methods and {len(sockets)} sockets without a key")


async def socket_close_code(keyed: Keyed, path: str) -> int | None:
    agent_id = keyed.agent(keyed.users["alice"][1])
    url = keyed.server.ws_url + concrete(path).replace("x-nothing-here", agent_id)
    async with websockets.connect(url) as ws:
        if path == MEDIA_PATH:  # Twilio's start names the agent; no token comes with it
            await ws.send(json.dumps({"event": "connected", "protocol": "Call"}))
            await ws.send(json.dumps(twilio_start(agent_id)))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return ws.close_code


def twilio_start(agent_id: str, token: str | None = None) -> dict[str, Any]:
    params = {"agent_id": agent_id, **({"token": token} if token else {})}
    return {
        "event": "start",
        "streamSid": "MZ1",
        "start": {
            "streamSid": "MZ1",
            "callSid": "CA1",
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": params,
        },
    }


def new_agent(keyed: Keyed, key: str, **body: Any) -> str:
    body = {"model": "scripted/demo", "name": "mine", **body}
    with keyed.http(key) as http:
        r = http.post("/v1/agents/", json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def test_users_cannot_reach_each_others_data(keyed: Keyed) -> None:
    alice, bob = keyed.users["alice"][1], keyed.users["bob"][1]
    a1 = new_agent(keyed, alice, memory_blocks=[{"label": "human", "value": "Alice's notes"}])
    b1 = keyed.agent(bob)
    with keyed.http(alice) as http:
        r = http.post(f"/v1/agents/{a1}/archival-memory", json={"text": "alice's secret"})
        assert r.status_code in (200, 201), r.text
        passage = (r.json()[0] if isinstance(r.json(), list) else r.json())["id"]
        r = http.post(
            f"/v1/agents/{a1}/messages", json={"messages": [{"role": "user", "content": "hi"}]}
        )
        assert r.status_code == 200, r.text
    a = f"/v1/agents/{a1}"
    attempts: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", a, None),
        ("PATCH", a, {"name": "bob was here"}),
        ("DELETE", a, None),
        ("GET", f"{a}/messages", None),
        ("POST", f"{a}/messages", {"messages": [{"role": "user", "content": "leak"}]}),
        ("POST", f"{a}/messages/stream", {"messages": [{"role": "user", "content": "leak"}]}),
        ("GET", f"{a}/core-memory/blocks", None),
        ("GET", f"{a}/core-memory/blocks/human", None),
        ("PATCH", f"{a}/core-memory/blocks/human", {"value": "hacked"}),
        ("GET", f"{a}/core-memory/blocks/human/history", None),
        ("GET", f"{a}/archival-memory", None),
        ("POST", f"{a}/archival-memory", {"text": "planted"}),
        ("GET", f"{a}/archival-memory/search?query=secret", None),
        ("DELETE", f"{a}/archival-memory/{passage}", None),
        ("DELETE", f"/v1/agents/{b1}/archival-memory/{passage}", None),  # via bob's own agent
        ("POST", f"{a}/voice/sessions", None),
    ]
    with keyed.http(bob) as http:
        for method, path, body in attempts:
            r = http.request(method, path, json=body)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
        r = http.post(
            "/v1/chat/completions",
            json={"model": a1, "messages": [{"role": "user", "content": "leak"}]},
        )
        assert r.status_code == 404
        assert a1 not in [x["id"] for x in http.get("/v1/agents/").json()]
    code = asyncio.run(voice_close(keyed.ws(a1), {"Authorization": f"Bearer {bob}"}))
    assert code == 4404
    with keyed.http(alice) as http:  # nothing of alice's changed
        assert http.get(a).json()["name"] == "mine"
        assert http.get(f"{a}/core-memory/blocks/human").json()["value"] == "Alice's notes"
        assert [p["id"] for p in http.get(f"{a}/archival-memory").json()] == [passage]
        assert len(http.get(f"{a}/messages").json()) >= 2
    with keyed.http(ADMIN) as http:  # the admin key sees everyone's
        assert {a1, b1} <= {x["id"] for x in http.get("/v1/agents/").json()}


def tool_item_route(keyed: Keyed) -> str | None:
    for path, route in flatten(list(keyed.server.app.routes)):
        if isinstance(route, Route) and re.fullmatch(r"/v1/tools/{[^}]+}", path):
            return path
    return None


SOURCE = """
def roll(sides: int) -> int:
    \"\"\"Roll a die.

    Args:
        sides: how many sides
    \"\"\"
    return sides
"""


def test_users_cannot_reach_each_others_tools(keyed: Keyed) -> None:
    if tool_item_route(keyed) is None:
        pytest.skip(
            "GET/PATCH/DELETE /v1/tools/{tool_id} does not exist yet (being added in "
            "voice_gateway/routes/rest_tools.py)"
        )
    alice, bob = keyed.users["alice"][1], keyed.users["bob"][1]
    with keyed.http(alice) as http:
        r = http.post("/v1/tools/", json={"source_code": SOURCE})
        assert r.status_code in (200, 201), r.text
        tool = r.json()["id"]
    with keyed.http(bob) as http:
        for method, body in (("GET", None), ("PATCH", {"description": "x"}), ("DELETE", None)):
            r = http.request(method, f"/v1/tools/{tool}", json=body)
            assert r.status_code == 404, (method, r.status_code, r.text)
        assert tool not in [t["id"] for t in http.get("/v1/tools/").json()]
    with keyed.http(alice) as http:
        assert http.get(f"/v1/tools/{tool}").status_code == 200


async def voice_close(url: str, headers: dict[str, str] | None = None) -> int | None:
    """Open the voice socket; the close code if the server closes it without a session."""
    c = await VoiceClient(url, headers=headers or {}).connect()
    try:
        return await c.wait_closed(timeout=10)
    finally:
        await c.close()


async def voice_starts(url: str, headers: dict[str, str] | None = None) -> str:
    c = await VoiceClient(url, headers=headers or {}).connect()
    try:
        return str((await c.start())["agent_id"])
    finally:
        await c.close()


def test_session_tokens_are_bound_and_short_lived(keyed: Keyed) -> None:
    alice_id, alice = keyed.users["alice"]
    bob_id, _ = keyed.users["bob"]
    a1, a2 = keyed.agent(alice), new_agent(keyed, alice)
    with keyed.http(alice) as http:
        issued = http.post(f"/v1/agents/{a1}/voice/sessions").json()
    assert 0 < issued["expires_at"] - time.time() <= 300
    token = issued["session_token"]
    assert asyncio.run(voice_starts(issued["url"])) == a1
    assert asyncio.run(voice_close(keyed.ws(a2, f"?session_token={token}"))) == 4401
    auth = keyed.server.app.state.gw.auth
    ttl = auth.token_ttl_s
    auth.token_ttl_s = -5  # the gateway's own signer, issuing an already expired token
    try:
        expired, _ = auth.issue_token(a1, Principal(alice_id, f"user:{alice_id}"))
    finally:
        auth.token_ttl_s = ttl
    assert asyncio.run(voice_close(keyed.ws(a1, f"?session_token={expired}"))) == 4401
    payload, _, sig = token.partition(".")  # claim to be bob with alice's signature
    forged = payload.replace(payload[:8], payload[:7] + "x") + "." + sig
    assert asyncio.run(voice_close(keyed.ws(a1, f"?session_token={forged}"))) == 4401
    # a genuine token of bob's for alice's agent: the agent is not his
    bobs, _ = auth.issue_token(a1, Principal(bob_id, f"user:{bob_id}"))
    assert asyncio.run(voice_close(keyed.ws(a1, f"?session_token={bobs}"))) == 4404
    # the phone socket: a token minted for another agent does not open this one
    assert asyncio.run(twilio_close(keyed, a1, auth.issue_token(a2, Principal())[0])) == 4401


async def twilio_close(keyed: Keyed, agent_id: str, token: str) -> int | None:
    async with websockets.connect(keyed.server.ws_url + MEDIA_PATH) as ws:
        await ws.send(json.dumps({"event": "connected", "protocol": "Call"}))
        await ws.send(json.dumps(twilio_start(agent_id, token)))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return ws.close_code


def test_origins_rest_and_socket(keyed: Keyed) -> None:
    own = f"http://127.0.0.1:{keyed.server.port}"
    with keyed.http(ADMIN) as http:
        r = http.get("/v1/agents/", headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "origin not allowed" in r.json()["detail"]
        r = http.get("/v1/agents/", headers={"Origin": "http://localhost:5173"})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
        assert http.get("/v1/agents/", headers={"Origin": own}).status_code == 200
        pre = {
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        }
        r = http.options("/v1/agents/", headers={"Origin": "http://localhost:5173", **pre})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
        r = http.options("/v1/agents/", headers={"Origin": "https://evil.example", **pre})
        assert r.status_code == 403
    alice = keyed.users["alice"][1]
    a1 = keyed.agent(alice)
    with keyed.http(alice) as http:
        url = http.post(f"/v1/agents/{a1}/voice/sessions").json()["url"]
    evil = {"Origin": "https://evil.example"}
    assert asyncio.run(voice_close(url, evil)) == 4403  # even with a valid token
    assert asyncio.run(voice_starts(url, {"Origin": "http://localhost:5173"})) == a1
    assert asyncio.run(voice_starts(url, {"Origin": own})) == a1
    assert asyncio.run(voice_starts(url)) == a1  # no Origin: not a browser


def test_origin_policy_settings() -> None:
    def policy(**kw: Any) -> OriginPolicy:
        return OriginPolicy(Settings(**kw))

    listed = policy(allowed_origins="https://app.example.com, https://*.example.org")
    assert listed.allowed("https://app.example.com", "gw.example.com")
    assert listed.allowed("https://eu.example.org", "gw.example.com")
    assert not listed.allowed("http://localhost:3000", "gw.example.com")  # the list replaces
    assert not listed.allowed("https://app.example.com.evil.net", "gw.example.com")
    assert policy(allowed_origins="*").allowed("https://anything.example", None)
    assert policy(public_url="https://voice.example.com").allowed("https://voice.example.com", "x")
    # own origin: keyed, any host; open (loopback) mode: a DNS-rebinding page is refused
    assert policy(api_key="k").allowed("https://gw.example.com", "gw.example.com")
    assert not policy().allowed("http://evil.example:8283", "evil.example:8283")
    assert policy().allowed("http://127.0.0.1:8283", "127.0.0.1:8283")
    assert not policy().allowed("null", "127.0.0.1:8283")


async def open_and_close(url: str) -> None:
    c = await VoiceClient(url).connect()
    await c.start()
    await c.close()


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_no_secret_in_logs(tmp_path: Path, fmt: str) -> None:
    """A real `voice-gateway serve` (uvicorn's access log on): requests that carry every kind
    of secret, in headers and in URLs, and none of them reaches the log."""
    db = f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"
    _, user_key = create_user(db, "carol")
    env = base_env(
        VG_DATABASE_URL=db,
        VG_API_KEY=ADMIN,
        OPENAI_API_KEY=OPENAI_KEY,
        VG_STT="openai",
        VG_LOG_FORMAT=fmt,
        VG_LOG_LEVEL="DEBUG",
    )
    gw = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        with httpx.Client(base_url=gw.url, timeout=30) as http:
            admin = {"Authorization": f"Bearer {ADMIN}"}
            user = {"Authorization": f"Bearer {user_key}"}
            agent = http.post("/v1/agents/", headers=user, json={"model": "scripted/demo"})
            agent_id = agent.json()["id"]
            issued = http.post(f"/v1/agents/{agent_id}/voice/sessions", headers=user).json()
            token = issued["session_token"]
            http.get(f"/v1/agents/{ADMIN}", headers=admin)  # secrets in paths and queries
            http.get(f"/v1/agents/?api_key={user_key}", headers=user)
            http.get(f"/v1/agents/{OPENAI_KEY}", headers={"Authorization": f"Bearer {OPENAI_KEY}"})
            http.get(f"/v1/agents/{agent_id}?session_token={token}", headers=user)
            http.get("/v1/agents/", headers={"Authorization": f"Basic {ADMIN}"})
            asyncio.run(open_and_close(issued["url"]))  # the socket's URL carries the token
            http.get(f"/v1/agents/{agent_id}/voice?session_token={token}")  # a plain GET
    finally:
        gw.stop()
    log = (tmp_path / "gateway.log").read_text()
    for secret in (ADMIN, user_key, token, OPENAI_KEY, token.partition(".")[2]):
        assert secret not in log, f"a secret reached the {fmt} log"
    # the access log went through the filter (it was written, with the secrets replaced)
    assert "/v1/agents/[REDACTED]" in log and "session_token=[REDACTED]" in log
    assert re.search(r"WebSocket /v1/agents/[^ ]+/voice\?session_token=\[REDACTED\]", log)
    if fmt == "json":
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert any("session_token=[REDACTED]" in line["msg"] for line in lines)
