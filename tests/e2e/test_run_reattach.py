"""A background run's stream re-attached on another gateway process and after a restart, with
Redis configured (voice_gateway/run_mirror.py): two real `voice-gateway serve` processes on one
database and one Redis. A run started on A streams token by token from B (from a cursor too)
and, after A restarts, from A; a run whose gateway is killed mid-run is marked failed and its
re-attached stream ends with stop reason `error`."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway_proc import GatewayProcess, base_env
from tests.support.servers import ServerThread
from tests.support.services import RedisServer

WORDS = " ".join(f"word{i}" for i in range(24))


@pytest.fixture
def pair(tmp_path: Path, redis_server: RedisServer) -> Iterator[tuple[GatewayProcess, ...]]:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    llm = FakeLLM()
    llm_srv = ServerThread(llm.app).start()
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_REDIS_URL=redis_server.url,
        VG_RUN_OWNER_TTL_S="3",
        VG_SLEEPTIME_MODEL="scripted/demo",
        OPENAI_BASE_URL=f"{llm_srv.url}/v1",
        OPENAI_API_KEY="test",
    )
    a = GatewayProcess(env, tmp_path / "a.log")
    b = GatewayProcess(env, tmp_path / "b.log")
    a.llm = llm  # type: ignore[attr-defined]
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()
        llm_srv.stop()


def frames(url: str, run_id: str, after: int = 0, out: list[Any] | None = None) -> list[Any]:
    """The re-attached stream: each `data:` frame (JSON, or the string "[DONE]"), appended to
    `out` as it comes."""
    out = [] if out is None else out
    with httpx.stream(
        "POST", f"{url}/v1/runs/{run_id}/stream", json={"starting_after": after}, timeout=120
    ) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                out.append("[DONE]" if line == "data: [DONE]" else json.loads(line[6:]))
    return out


def said(chunks: list[Any]) -> str:
    return "".join(
        c["content"]
        for c in chunks
        if isinstance(c, dict) and c.get("message_type") == "assistant_message"
    )


def stop(chunks: list[Any]) -> str:
    return next(
        c["stop_reason"]
        for c in chunks
        if isinstance(c, dict) and c.get("message_type") == "stop_reason"
    )


def start_run(gw: GatewayProcess, agent: str) -> str:
    resp = httpx.post(
        f"{gw.url}/v1/agents/{agent}/messages/async",
        json={"messages": [{"role": "user", "content": "count"}]},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["id"])


def test_reattach_on_another_gateway_after_a_restart_and_a_crash(
    pair: tuple[GatewayProcess, ...],
) -> None:
    a, b = pair
    llm: FakeLLM = a.llm  # type: ignore[attr-defined]
    agent = httpx.post(f"{a.url}/v1/agents/", json={"model": "openai/fake"}, timeout=30).json()[
        "id"
    ]

    llm.push(Reply(text=WORDS, chunk_delay_s=0.15))
    run = start_run(a, agent)
    on_b = frames(b.url, run)  # B does not run it: replayed and followed from Redis
    assert said(on_b) == WORDS and stop(on_b) == "end_turn" and on_b[-1] == "[DONE]"
    seqs = [c["seq_id"] for c in on_b if isinstance(c, dict) and "seq_id" in c]
    cut = seqs[len(seqs) // 2]
    later = frames(b.url, run, after=cut)
    assert [c["seq_id"] for c in later if isinstance(c, dict) and "seq_id" in c] == [
        s for s in seqs if s > cut
    ]
    assert httpx.get(f"{b.url}/v1/runs/{run}").json()["status"] == "completed"

    a.stop()  # a restart: the registry of A is gone, Redis still has the stream
    a.start()
    assert said(frames(a.url, run)) == WORDS

    llm.push(Reply(text=WORDS * 2, chunk_delay_s=0.5))
    doomed = start_run(a, agent)
    got: list[Any] = []
    follower = threading.Thread(target=frames, args=(b.url, doomed, 0, got))
    follower.start()
    deadline = time.monotonic() + 60  # a poll, not a timing assertion
    while len(said(got).split()) < 3:  # some tokens streamed, through B
        assert time.monotonic() < deadline and follower.is_alive()
        time.sleep(0.1)
    a.signal(signal.SIGKILL)
    a.wait()
    follower.join(120)
    assert not follower.is_alive()
    assert said(got) and said(got) != WORDS * 2  # what was streamed before the crash
    assert stop(got) == "error" and got[-1] == "[DONE]"
    run_b = httpx.get(f"{b.url}/v1/runs/{doomed}").json()
    assert run_b["status"] == "failed", run_b
    assert run_b["metadata"]["error"] == "the gateway running it stopped"
