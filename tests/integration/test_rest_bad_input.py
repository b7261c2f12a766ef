"""Bad input on the text API: clear statuses with a JSON `detail`, and nothing lost."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from memory.service import Memory
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.servers import ServerThread


@pytest.fixture
def srv(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    server: ServerThread = gateway_factory(
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="k", max_body_bytes=50_000
    )
    return server


def agent(http: httpx.Client, **body: object) -> str:
    resp = http.post("/v1/agents/", json={"model": "openai/fake", **body})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def test_malformed_json(srv: ServerThread) -> None:
    with httpx.Client(base_url=srv.url) as http:
        for path in ("/v1/agents/", f"/v1/agents/{agent(http)}/messages"):
            r = http.post(path, content=b'{"name": ', headers={"content-type": "application/json"})
            assert r.status_code == 400 and "malformed JSON" in r.json()["detail"]
        r = http.post("/v1/agents/", json={"memory_blocks": "nope"})
        assert r.status_code == 422 and "memory_blocks" in r.json()["detail"]
        r = http.post("/v1/agents/", json={"model": "anthropic/claude"})  # not configured here
        assert r.status_code == 422 and "'anthropic' is not configured" in r.json()["detail"]
        assert "ANTHROPIC_API_KEY" in r.json()["detail"]
        r = http.post("/v1/agents/", json={"model": "cohere/command"})  # no such provider
        assert r.status_code == 422 and "openai/<model>" in r.json()["detail"]
        r = http.post("/v1/agents/", json={"embedding": "cohere/x"})
        assert r.status_code == 422 and "local/all-minilm-l6-v2" in r.json()["detail"]
        r = http.post("/v1/agents/", json={"tools": ["rm_rf"]})
        assert r.status_code == 422 and "rm_rf" in r.json()["detail"]


def test_unknown_agent_and_block(srv: ServerThread) -> None:
    with httpx.Client(base_url=srv.url) as http:
        for method, path in [
            ("GET", "/v1/agents/agent-nope"),
            ("PATCH", "/v1/agents/agent-nope"),
            ("DELETE", "/v1/agents/agent-nope"),
            ("GET", "/v1/agents/agent-nope/messages"),
            ("GET", "/v1/agents/agent-nope/core-memory/blocks"),
        ]:
            r = http.request(method, path, json={})
            assert r.status_code == 404 and "agent not found" in r.json()["detail"], (method, path)
        a = agent(http)
        r = http.get(f"/v1/agents/{a}/core-memory/blocks/nope")
        assert r.status_code == 404 and "block not found" in r.json()["detail"]
        r = http.delete(f"/v1/agents/{a}/archival-memory/passage-nope")
        assert r.status_code == 404


def test_block_over_limit_writes_nothing(srv: ServerThread) -> None:
    with httpx.Client(base_url=srv.url) as http:
        a = agent(http, memory_blocks=[{"label": "human", "value": "short", "limit": 20}])
        r = http.patch(f"/v1/agents/{a}/core-memory/blocks/human", json={"value": "x" * 21})
        assert r.status_code == 422 and "limit 20" in r.json()["detail"]
        block = http.get(f"/v1/agents/{a}/core-memory/blocks/human").json()
        assert block["value"] == "short" and block["version"] == 1
        assert http.get(f"/v1/agents/{a}/core-memory/blocks/human/history").json() == []
        r = http.post(
            "/v1/agents/", json={"memory_blocks": [{"label": "h", "value": "abc", "limit": 2}]}
        )
        assert r.status_code == 422


def test_concurrent_writers_never_lose_an_update(srv: ServerThread, db_url: str) -> None:
    with httpx.Client(base_url=srv.url) as http:
        a = agent(http, memory_blocks=[{"label": "human", "value": "", "limit": 5000}])

    async def main() -> None:
        async with httpx.AsyncClient(base_url=srv.url) as client:
            # stale writers with If-Match: exactly one wins, the rest get a clean 409
            rs = await asyncio.gather(
                *(
                    client.patch(
                        f"/v1/agents/{a}/core-memory/blocks/human",
                        json={"value": f"writer {i}"},
                        headers={"If-Match": "1"},
                    )
                    for i in range(6)
                )
            )
            assert sorted(r.status_code for r in rs) == [200] + [409] * 5
        memory = await Memory.open(db_url, migrate=False)
        try:  # read-modify-write edits (what memory tools do) all land
            await asyncio.gather(
                *(
                    memory.blocks.modify(a, "human", lambda v, i=i: f"{v}\nfact {i}", actor="agent")
                    for i in range(8)
                )
            )
            value = (await memory.blocks.get(a, "human")).value
            assert all(f"fact {i}" in value for i in range(8))
        finally:
            await memory.close()

    asyncio.run(main())


def test_llm_down_or_garbage(
    gateway_factory, sqlite_url: str, fake_llm: FakeLLM, fake_llm_url: str
) -> None:  # type: ignore[no-untyped-def]
    down = gateway_factory(
        database_url=sqlite_url, openai_base_url="http://127.0.0.1:9/v1", openai_api_key="k"
    )
    with httpx.Client(base_url=down.url, timeout=30) as http:
        a = agent(http)
        r = http.post(
            f"/v1/agents/{a}/messages", json={"messages": [{"role": "user", "content": "hello?"}]}
        )
        assert r.status_code == 200 and r.json()["stop_reason"]["stop_reason"] == "llm_api_error"
        assert "cannot reach" in r.json()["error"]
        body = http.post(
            f"/v1/agents/{a}/messages/stream",
            json={"messages": [{"role": "user", "content": "again"}]},
        ).text
        assert (
            "event: error" in body
            and '"stop_reason": "llm_api_error"' in body
            and body.rstrip().endswith("[DONE]")
        )
        assert http.get(f"/v1/agents/{a}").status_code == 200
        history = http.get(f"/v1/agents/{a}/messages", params={"order": "asc"}).json()
        assert [m["content"] for m in history][1:] == ["hello?", "again"]
        assert history[0]["message_type"] == "system_message"
    ok = gateway_factory(
        database_url=sqlite_url.replace("vg.db", "vg2.db"),
        openai_base_url=fake_llm_url,
        openai_api_key="k",
    )
    with httpx.Client(base_url=ok.url, timeout=30) as http:
        a = agent(http)
        fake_llm.push(Reply(text="alpha beta gamma delta", garbage_after=3))
        body = http.post(
            f"/v1/agents/{a}/messages",
            json={
                "messages": [{"role": "user", "content": "x"}],
                "streaming": True,
                "stream_tokens": True,
            },
        ).text
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
        assert any(e.get("stop_reason") == "llm_api_error" for e in events)
        assert "event: error" in body
        stored = http.get(f"/v1/agents/{a}/messages", params={"order": "asc"}).json()
        assert stored[-1]["message_type"] == "assistant_message" and stored[-1][
            "content"
        ].startswith("alpha")
        fake_llm.push(Reply(text="recovered"))
        r = http.post(
            f"/v1/agents/{a}/messages", json={"messages": [{"role": "user", "content": "y"}]}
        )
        assert r.json()["messages"][-1]["content"] == "recovered"


def test_oversized_body_is_413(srv: ServerThread) -> None:
    with httpx.Client(base_url=srv.url) as http:
        a = agent(http)
        r = http.post(f"/v1/agents/{a}/archival-memory", json={"text": "x" * 60_000})
        assert r.status_code == 413 and "50000" in r.json()["detail"]

        def chunks():  # type: ignore[no-untyped-def]
            for _ in range(30):
                yield b"x" * 4096

        r = http.post(
            f"/v1/agents/{a}/archival-memory",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413
        assert http.get(f"/v1/agents/{a}/archival-memory").json() == []


def test_empty_message_is_422(srv: ServerThread) -> None:
    with httpx.Client(base_url=srv.url) as http:
        a = agent(http)
        r = http.post(
            f"/v1/agents/{a}/messages", json={"messages": [{"role": "user", "content": "   "}]}
        )
        assert r.status_code == 422 and "user message" in r.json()["detail"]
        r = http.get(f"/v1/agents/{a}/messages", params={"limit": "many"})
        assert r.status_code == 422
