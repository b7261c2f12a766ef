"""Scale-out: two `voice-gateway serve` processes and two `voice-gateway sleeptime` workers on
one PostgreSQL and one Redis. Calls and text turns spread over both gateways; memory written by
a worker reaches calls on both; one agent hit on both gateways at once never interleaves a
turn; a gateway killed with SIGKILL loses no stored turn and its caller carries on at the other.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway_proc import GatewayProcess, base_env
from tests.support.procs import running_workers
from tests.support.servers import ServerThread
from tests.support.services import RedisServer, drop_postgres_database, postgres_database
from tests.support.sleeptime import Ledger, block, new_agent, say, wait_until
from tests.support.voice_client import VoiceClient

pytestmark = pytest.mark.skipif(
    not os.environ.get("VG_TEST_POSTGRES_URL"),
    reason="scale-out runs on PostgreSQL: set VG_TEST_POSTGRES_URL (scripts/test does when a "
    "server answers on 127.0.0.1:5432)",
)


@dataclass
class Cluster:
    a: GatewayProcess
    b: GatewayProcess
    llm: FakeLLM
    database_url: str


def echo(body: dict[str, Any]) -> Reply:
    """Answers 'ack: <the user's words>' slowly, so concurrent turns would overlap in time."""
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    return Reply(text=f"ack: {last['content']}", chunk_delay_s=0.04)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[Cluster]:
    import redis

    tmp = tmp_path_factory.mktemp("scaleout")
    made = postgres_database()
    assert made is not None
    url, admin = made
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    llm = FakeLLM(echo)
    llm_srv = ServerThread(llm.app).start()
    shared = {
        "VG_DATABASE_URL": url,
        "VG_REDIS_URL": redis_server.url,
        "VG_SLEEPTIME_MODEL": "scripted/demo",
        "VG_SLEEPTIME_EVERY_TURNS": "5",
    }
    env = base_env(**shared, OPENAI_BASE_URL=f"{llm_srv.url}/v1", OPENAI_API_KEY="test")
    a = GatewayProcess(env, tmp / "gateway-a.log")
    b = GatewayProcess(env, tmp / "gateway-b.log")
    try:
        a.start()
        b.start()
        worker_env = {"VG_SLEEPTIME_MODEL": "scripted/demo", "VG_SLEEPTIME_EVERY_TURNS": "5"}
        with running_workers(url, redis_server.url, tmp, n=2, env=worker_env):
            yield Cluster(a, b, llm, url)
    finally:
        a.stop()
        b.stop()
        llm_srv.stop()
        drop_postgres_database(url, admin)


async def test_turns_spread_over_both_gateways_and_memory_reaches_both(cluster: Cluster) -> None:
    http_a = httpx.AsyncClient(base_url=cluster.a.url, timeout=60)
    http_b = httpx.AsyncClient(base_url=cluster.b.url, timeout=60)
    agent = await new_agent(http_a, "nora")  # scripted model: deterministic memory
    call_a = await VoiceClient(f"{cluster.a.ws_url}/v1/agents/{agent}/voice").connect()
    call_b = await VoiceClient(f"{cluster.b.ws_url}/v1/agents/{agent}/voice").connect()
    await call_a.start()
    await call_b.start()
    turns = [
        "Hello, my name is Nora Berg.",
        "I live in Bergen.",
        "Please remember that I like cloudberries.",
        "It rains a lot here.",
        "That is all.",
    ]
    for i, text in enumerate(turns):  # alternate: A, B, A, B, A
        await say(http_a if i % 2 == 0 else http_b, agent, text)
    # a worker rewrote `human`; both gateways' calls hear of it over Redis pub/sub
    seen_a = await call_a.wait_for("memory.updated", timeout=90, label="human")
    seen_b = await call_b.wait_for("memory.updated", timeout=90, label="human")
    assert seen_a["version"] == seen_b["version"] >= 2
    human_b = await block(http_b, agent)
    assert "Nora Berg" in human_b["value"] and "Bergen" in human_b["value"]
    # the next spoken turn on either gateway is answered from the new block
    for call in (call_a, call_b):
        await call.send({"type": "input_text", "text": "What is my name?"})
        done = await call.wait_for("response.done", timeout=60)
        reply = await call.wait_for("response.text.done", item_id=done["item_id"])
        assert "Nora" in reply["text"]
    stored = (await http_b.get(f"/v1/agents/{agent}/messages", params={"limit": 100})).json()
    users = [m["content"] for m in stored if m["message_type"] == "user_message"]
    assert set(turns) <= set(users) and users.count("What is my name?") == 2
    for c in (call_a, call_b):
        await c.close()
    await http_a.aclose()
    await http_b.aclose()


async def test_one_agent_on_both_gateways_never_interleaves(cluster: Cluster) -> None:
    async with (
        httpx.AsyncClient(base_url=cluster.a.url, timeout=120) as http_a,
        httpx.AsyncClient(base_url=cluster.b.url, timeout=120) as http_b,
    ):
        agent = await new_agent(http_a, "busy", model="openai/fake")
        texts = [f"request number {i}" for i in range(8)]
        replies = await asyncio.gather(
            *(say(http_a if i % 2 else http_b, agent, t) for i, t in enumerate(texts))
        )
        assert sorted(replies) == sorted(f"ack: {t}" for t in texts)
        page = await http_a.get(
            f"/v1/agents/{agent}/messages", params={"order": "asc", "limit": 100}
        )
        kinds = [
            (m["message_type"], m["content"])
            for m in page.json()
            if m["message_type"] != "system_message"
        ]
    # stored strictly as user, its answer, user, its answer ...: no turn interleaved another
    assert len(kinds) == 16
    for (k1, user), (k2, answer) in zip(kinds[::2], kinds[1::2], strict=True):
        assert (k1, k2) == ("user_message", "assistant_message")
        assert answer == f"ack: {user}"
    # each model call saw the earlier turns complete (history grows by whole turns)
    mine = [
        r
        for r in cluster.llm.requests
        if any("request number" in str(m.get("content")) for m in r["messages"])
    ]
    sizes = sorted(len(r["messages"]) for r in mine)
    assert sizes == [2 + 2 * i for i in range(8)]  # system + 2 per earlier turn + the new one


async def test_sigkill_loses_no_stored_turn_and_the_caller_moves_on(cluster: Cluster) -> None:
    http_b = httpx.AsyncClient(base_url=cluster.b.url, timeout=60)
    agent = await new_agent(http_b, "survivor")
    call = await VoiceClient(f"{cluster.a.ws_url}/v1/agents/{agent}/voice").connect()
    started = await call.start()
    conversation = started["conversation_id"]
    for text in ("My name is Ines.", "I live in Porto."):
        await call.send({"type": "input_text", "text": text})
        await call.wait_for("response.done", timeout=60, count=1 if "Ines" in text else 2)
    await call.send({"type": "input_text", "text": "Tell me a long story please."})
    await call.wait_for("response.audio.started", timeout=60, count=3)
    cluster.a.signal(signal.SIGKILL)
    cluster.a.wait(30)
    code = await call.wait_closed(timeout=30)
    assert code != 1000  # an abrupt drop, not a goodbye
    # the caller reconnects (as the page does, through the load balancer) to B
    again = await VoiceClient(f"{cluster.b.ws_url}/v1/agents/{agent}/voice").connect()
    resumed = await again.start(conversation_id=conversation)
    assert resumed["conversation_id"] == conversation
    stored = (
        await http_b.get(f"/v1/agents/{agent}/messages", params={"order": "asc", "limit": 100})
    ).json()
    users = [m["content"] for m in stored if m["message_type"] == "user_message"]
    assert users[:2] == ["My name is Ines.", "I live in Porto."]
    await again.send({"type": "input_text", "text": "What is my name?"})
    done = await again.wait_for("response.done", timeout=60)
    reply = await again.wait_for("response.text.done", item_id=done["item_id"])
    assert reply["text"]
    await again.close()
    await http_b.aclose()
    # every stored turn of that agent reaches the workers: B publishes what A left unsent
    # (including a turn A published but was killed before marking sent: B's next poll resends it)
    ledger = Ledger(cluster.database_url)

    async def all_sent() -> bool:
        box = await ledger.outbox()
        return bool(box) and all(box.values())

    try:
        await wait_until(ledger.all_processed, "every outbox turn processed", timeout=90)
        await wait_until(all_sent, "every outbox turn marked sent", timeout=30)
    finally:
        await ledger.close()
