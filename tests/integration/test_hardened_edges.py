"""Hardened edges, each against a live gateway on loopback: malformed
credentials, oversized request heads, cursors of other users, empty bodies, loose JSON and
query types, 405 without Allow, and the public health route."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import websockets
from starlette.routing import Route

from tests.integration.test_security import ADMIN, create_user, twilio_start
from tests.support.gateway import running_gateway
from tests.support.gateway_proc import GatewayProcess, base_env
from tests.support.servers import ServerThread
from tests.support.voice_client import VoiceClient

# as a client's bytes: UTF-8 (the server reads headers as Latin-1) and raw Latin-1
NON_ASCII = ["Bearer é".encode(), "Bearer ÿþ".encode("latin-1"), "Bearer clé-ü".encode()]


@dataclass
class Live:
    server: ServerThread
    users: dict[str, str]  # name -> key

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    db = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('edges') / 'vg.db'}"
    users = {name: create_user(db, name)[1] for name in ("alice", "bob")}
    with running_gateway(db, api_key=ADMIN) as srv:
        yield Live(srv, users)


def new_agent(http: httpx.Client) -> str:
    r = http.post("/v1/agents/", json={"model": "scripted/demo"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


# ---- (a) malformed credentials: 401 / 4401, counted by the rate limiter ----------------------


async def close_code(url: str, headers: dict[str, Any] | None = None) -> int | None:
    c = await VoiceClient(url, headers=headers or {}).connect()
    try:
        return await c.wait_closed(timeout=10)
    finally:
        await c.close()


async def twilio_close(ws_url: str, agent_id: str, token: str) -> int | None:
    async with websockets.connect(ws_url + "/v1/telephony/twilio/media") as ws:
        await ws.send(json.dumps(twilio_start(agent_id, token)))
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
        return ws.close_code


def test_malformed_credentials_are_refused_and_rate_limited(tmp_path: Path) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"
    with running_gateway(
        db,
        api_key=ADMIN,
        voice=True,
        stt="openai",  # no audio here: spare loading whisper
        openai_api_key="sk-unused",
        twilio_auth_token="twilio-token",
        rate_limit_rps=0.1,  # one more attempt every 10 s: none refills during the test
        rate_limit_burst=6,
    ) as srv:
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {ADMIN}"}) as h:
            agent = new_agent(h)
            token = h.post(f"/v1/agents/{agent}/voice/sessions").json()["session_token"]
        voice = f"{srv.ws_url}/v1/agents/{agent}/voice"
        payload = token.partition(".")[0]
        # three refused socket attempts (they count), while the budget lasts: 4401 each
        assert asyncio.run(close_code(voice, {"Authorization": "Bearer é"})) == 4401
        bad_sig = quote(f"{payload}.é-not-a-signature")
        assert asyncio.run(close_code(f"{voice}?session_token={bad_sig}")) == 4401
        assert asyncio.run(close_code(f"{voice}?session_token={quote('é.ü')}")) == 4401
        # the phone socket's token is checked the same way, and counts too
        assert asyncio.run(twilio_close(srv.ws_url, agent, f"{payload}.ß")) == 4401
        with httpx.Client(base_url=srv.url) as anon:
            codes = []
            for i in range(8):
                r = anon.get("/v1/agents/", headers={"Authorization": NON_ASCII[i % 3]})
                codes.append(r.status_code)
                assert r.headers["content-type"] == "application/json"
                assert r.json()["detail"], r.text
        # 6 in the burst: 4 sockets (3 voice, 1 phone) + 2 HTTP 401s, then 429s (never a 500)
        assert codes[:2] == [401, 401] and set(codes[2:]) == {429}, codes
        # a refused socket credential over the budget is a 4429, not another free guess
        assert asyncio.run(close_code(voice, {"Authorization": "Bearer ÿþ"})) == 4429
        # the good key still works: the refusals were counted against the caller's IP
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {ADMIN}"}) as h:
            assert h.get(f"/v1/agents/{agent}").status_code == 200


# ---- (b) request head limit: 431 from the server we run -------------------------------------


def raw_request(port: int, chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """Send `chunks` until the server answers or hangs up: (its answer, bytes sent)."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            for chunk in chunks:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:  # the server answered and closed while we were still sending
            pass
        answer = b""
        try:
            while block := s.recv(65536):
                answer += block
        except OSError:
            pass
    return answer, sent


def head(extra: int, path: bytes = b"/v1/health/", more: bytes = b"") -> bytes:
    return (
        b"GET "
        + path
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + more
        + b"X-Pad: "
        + b"a" * extra
        + b"\r\nConnection: close\r\n\r\n"
    )


def assert_431(answer: bytes) -> None:
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large", answer[:200]
    body = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert "request headers over 4096 bytes" in body["detail"]


def test_request_head_limit_in_process_server(sqlite_url: str) -> None:
    with running_gateway(sqlite_url, max_header_bytes=4096) as srv:
        answer, _ = raw_request(srv.port, iter([head(3000)]))
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert_431(raw_request(srv.port, iter([head(5000)]))[0])
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(600))  # many small headers
        assert_431(raw_request(srv.port, iter([head(10, more=many)]))[0])
        assert_431(raw_request(srv.port, iter([head(10, path=b"/?q=" + b"x" * 5000)]))[0])
        upgrade = b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        assert_431(raw_request(srv.port, iter([head(5000, b"/v1/agents/a/voice", upgrade)]))[0])

        # a 64 MB header, streamed: refused after the first reads, never buffered whole
        def endless() -> Iterator[bytes]:
            yield b"GET /v1/health/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
            for _ in range(1024):
                yield b"a" * 65536

        answer, sent = raw_request(srv.port, endless())
        assert_431(answer)
        assert sent < 16 * 1024 * 1024, sent
        with httpx.Client(base_url=srv.url) as http:  # and the server is fine
            assert http.get("/v1/health/").status_code == 200


def test_request_head_limit_in_voice_gateway_serve(tmp_path: Path) -> None:
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_VOICE="0",
        VG_MAX_HEADER_BYTES="4096",
    )
    gw = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        assert_431(raw_request(gw.port, iter([head(5000)]))[0])
        assert raw_request(gw.port, iter([head(3000)]))[0].startswith(b"HTTP/1.1 200 ")
    finally:
        gw.stop()


# ---- (c) cursors only within the caller's own objects ----------------------------------------


def test_cursors_of_other_users_are_unknown_ids(keyed: Live) -> None:
    with keyed.http(keyed.users["alice"]) as alice, keyed.http(keyed.users["bob"]) as bob:
        mine = [new_agent(alice) for _ in range(3)]
        theirs = new_agent(bob)
        r = bob.post(f"/v1/agents/{theirs}/archival-memory", json={"text": "bob's fact"})
        bobs_passage = r.json()[0]["id"]
        r = alice.post(f"/v1/agents/{mine[0]}/archival-memory", json={"text": "alice's fact"})
        alices_passage = r.json()[0]["id"]
        for cursor in ("after", "before"):
            for order in ("asc", "desc"):
                unknown = alice.get(f"/v1/agents/?{cursor}=agent-nope&order={order}")
                other = alice.get(f"/v1/agents/?{cursor}={theirs}&order={order}")
                assert other.status_code == unknown.status_code == 200
                assert other.json() == unknown.json(), (cursor, order)
                assert [a["id"] for a in other.json()] == mine[:: 1 if order == "asc" else -1]
        passages = f"/v1/agents/{mine[0]}/archival-memory"
        unknown = alice.get(f"{passages}?after=passage-nope")
        other = alice.get(f"{passages}?after={bobs_passage}")
        assert other.status_code == unknown.status_code == 404
        assert other.json()["detail"].replace(bobs_passage, "X") == unknown.json()[
            "detail"
        ].replace("passage-nope", "X")
        # the same user's other agent's passage is no cursor of this agent either
        assert (
            alice.get(f"/v1/agents/{mine[1]}/archival-memory?after={alices_passage}").status_code
            == 404
        )
        assert alice.get(f"{passages}?after={alices_passage}").json() == []  # its own: works


# ---- (d) empty bodies, (e) strict types -------------------------------------------------------


def test_empty_body_is_400(keyed: Live) -> None:
    with keyed.http(ADMIN) as http:
        agent = new_agent(http)
        before = len(http.get("/v1/agents/?limit=1000").json())
        for method, path in [
            ("POST", "/v1/agents/"),
            ("POST", "/v1/agents"),
            ("PATCH", f"/v1/agents/{agent}"),
            ("PATCH", f"/v1/agents/{agent}/core-memory/blocks/human"),
            ("POST", f"/v1/agents/{agent}/messages"),
            ("POST", f"/v1/agents/{agent}/archival-memory"),
            ("POST", "/v1/tools/"),
        ]:
            for body in (b"", b"   ", b"\n\t \r\n"):
                r = http.request(
                    method, path, content=body, headers={"content-type": "application/json"}
                )
                assert r.status_code == 400, (method, path, body, r.text)
                assert "empty request body" in r.json()["detail"]
        assert len(http.get("/v1/agents/?limit=1000").json()) == before  # nothing created
        assert http.post("/v1/agents/", json={}).status_code == 201  # {} still means defaults


def test_a_path_with_a_control_character_is_404(keyed: Live) -> None:
    """`/v1/folders/%0A` once reached the folder list (a route pattern's `$` matches before a
    final newline) and answered a list where the item route's schema is an object."""
    with keyed.http(ADMIN) as http:
        assert http.get("/v1/folders/").status_code == 200
        for path in ("/v1/folders/%0A", "/v1/agents/%0A", "/v1/agents/%00x", "/v1/tools/%7F"):
            r = http.get(path)
            assert r.status_code == 404, (path, r.text)
            assert "control character" in r.json()["detail"]


def test_json_fields_and_query_parameters_are_strict(keyed: Live) -> None:
    with keyed.http(ADMIN) as http:
        agent = new_agent(http)
        block = f"/v1/agents/{agent}/core-memory/blocks/human"
        original = http.get(block).json()
        bodies: list[tuple[str, str, dict[str, Any], str]] = [
            ("PATCH", block, {"limit": True}, "limit"),
            ("PATCH", block, {"read_only": 0}, "read_only"),
            ("PATCH", block, {"value": 5}, "value"),
            ("PATCH", block, {"limit": "7000"}, "limit"),
            ("PATCH", block, {"version": 1.0}, "version"),
            ("POST", "/v1/agents/", {"memory_blocks": [{"label": "h", "limit": False}]}, "limit"),
            ("POST", "/v1/agents/", {"include_base_tools": "yes"}, "include_base_tools"),
            ("POST", "/v1/agents/", {"name": 12}, "name"),
            ("PATCH", f"/v1/agents/{agent}", {"voice_default": 1}, "voice_default"),
            (
                "POST",
                f"/v1/agents/{agent}/archival-memory",
                {"text": "x", "created_at": 5},
                "created_at",
            ),
            (
                "POST",
                f"/v1/agents/{agent}/messages",
                {"input": "hi", "max_steps": True},
                "max_steps",
            ),
        ]
        for method, path, body, field in bodies:
            r = http.request(method, path, json=body)
            assert r.status_code == 422, (method, path, body, r.text)
            assert field in r.json()["detail"], (body, r.json())
        assert http.get(block).json() == original  # nothing was written
        queries = [
            ("/v1/agents/?limit=abc", "limit"),
            ("/v1/agents/?limit=5_0", "limit"),
            ("/v1/agents/?limit=", "limit"),
            ("/v1/agents/?order=null", "order"),
            ("/v1/tools/?order=DESC", "order"),
            (f"/v1/agents/{agent}/archival-memory?ascending=maybe", "ascending"),
            (
                f"/v1/agents/{agent}/archival-memory/search?query=x&tag_match_mode=true",
                "tag_match_mode",
            ),
            (f"/v1/agents/{agent}/messages?order=sideways", "order"),
        ]
        for path, field in queries:
            r = http.get(path)
            assert r.status_code == 422, (path, r.text)
            assert field in r.json()["detail"], (path, r.json())
        # the valid spellings still work
        for path in (
            "/v1/agents/?order=desc&limit=2",
            f"/v1/agents/{agent}/archival-memory?ascending=false",
        ):
            assert http.get(path).status_code == 200, path
        r = http.post(
            f"/v1/agents/{agent}/archival-memory",
            json={"text": "t", "created_at": "2025-01-02T03:04:05Z"},
        )
        assert r.status_code == 200 and r.json()[0]["created_at"].startswith("2025-01-02T03:04:05")


# ---- (f) Allow on every 405, (g) public health ------------------------------------------------


def test_every_405_carries_allow(sqlite_url: str) -> None:
    # hundreds of requests in a burst: a rate limit that does not get in the way
    with running_gateway(
        sqlite_url,
        voice=True,
        stt="openai",
        openai_api_key="sk-unused",
        rate_limit_rps=1000,
        rate_limit_burst=5000,
    ) as srv:
        routes = [r for r in srv.app.routes if isinstance(r, Route) and r.methods]  # type: ignore[attr-defined]
        checked = 0
        with httpx.Client(base_url=srv.url) as http:
            for url in sorted({r.path.replace("{", "").replace("}", "") for r in routes}):
                # every method any route serves at this URL (templates overlap: .../search)
                allowed = set().union(*(r.methods or () for r in routes if r.path_regex.match(url)))
                for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - allowed):
                    r = http.request(method, url)
                    assert r.status_code == 405, (method, url, r.status_code)
                    assert set(r.headers["allow"].split(", ")) == allowed, (method, url)
                    assert r.json()["detail"]
                    checked += 1
            r = http.post("/index.html")  # the static web client
            assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"
        assert checked > 60, checked


def test_health_is_public_everywhere(keyed: Live) -> None:
    with keyed.http() as anon, keyed.http("wrong-key") as wrong:
        for client in (anon, wrong):
            for path in ("/v1/health/", "/v1/health"):
                r = client.get(path)
                assert r.status_code == 200, (path, r.text)
                assert set(r.json()) == {"status", "version"}  # nothing else, no secrets
        doc = anon.get("/openapi.json").json()
        assert anon.get("/v1/agents/").status_code == 401  # the rest is not public
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            public = path.rstrip("/") == "/v1/health"
            assert (op["security"] == []) is public, (method, path, op["security"])
            assert ("401" in op["responses"]) is not public, (method, path)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "rest_api.md").read_text()
    assert "`GET /v1/health/` is public" in docs
