"""Redis outage: Redis (no persistence, like a crashed cache) is stopped during a live voice
call while text turns arrive. The call, the REST API and chat completions keep answering, the
turns are spooled in the outbox, and once Redis is back every turn is published and processed,
including one that Redis had accepted but lost before a worker read it."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import running_gateway
from tests.support.procs import WorkerProcess
from tests.support.services import RedisServer
from tests.support.sleeptime import Ledger, block, history, new_agent, say, wait_until
from tests.support.voice_client import VoiceClient


async def spoken(call: VoiceClient, text: str) -> str:
    """A typed turn on the voice socket; returns the reply text."""
    before = len(call.of_type("response.done"))
    await call.send({"type": "input_text", "text": text})
    done = await call.wait_for("response.done", timeout=60, count=before + 1)
    assert done["stop_reason"] == "end_turn", done
    reply = await call.wait_for("response.text.done", item_id=done["item_id"])
    return str(reply["text"])


async def test_turns_survive_a_redis_outage(
    sqlite_url: str,
    redis_server: RedisServer,
    redis_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="transcripts.bus")
    worker = WorkerProcess(sqlite_url, redis_url, tmp_path / "worker.log", consumer="w1")
    ledger = Ledger(sqlite_url)
    with running_gateway(sqlite_url, redis_url=redis_url, voice=True) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agent = await new_agent(http)
            worker.start()
            try:
                call = await VoiceClient(f"{gw.ws_url}/v1/agents/{agent}/voice").connect()
                await call.start()
                await say(http, agent, "Hello there.")
                await wait_until(ledger.all_processed, "the first turn processed")

                # a turn Redis accepts but loses: no worker reads it before Redis goes down
                assert worker.terminate() == 0
                await say(http, agent, "My name is Ada.")
                await wait_until(_all_sent(ledger), "the turn published")
                redis_server.stop()

                # the outage: a spoken turn, a REST turn and a chat completion all answer
                assert "remember" in (await spoken(call, "I live in Lisbon.")).lower()
                assert await say(http, agent, "Remember that I like jazz.")
                resp = await http.post(
                    "/v1/chat/completions",
                    json={
                        "model": agent,
                        "messages": [{"role": "user", "content": "The weather is fine."}],
                    },
                )
                assert resp.status_code == 200, resp.text
                assert resp.json()["choices"][0]["message"]["content"]
                ready = (await http.get("/ready")).json()
                assert ready["status"] == "ready" and ready["checks"]["redis"] is False
                spooled = [e for e, sent in (await ledger.outbox()).items() if not sent]
                assert len(spooled) == 3

                redis_server.start()
                worker.start()
                await wait_until(ledger.all_processed, "every turn processed after the outage")
                box = await ledger.outbox()
                assert len(box) == 5 and all(box.values())

                human = await block(http, agent)
                assert "Name: Ada" in human["value"]  # the turn Redis lost
                assert "Location: Lisbon" in human["value"]  # spooled during the outage
                assert "- I like jazz" in human["value"]
                assert [c["actor"] for c in await history(http, agent)] == ["sleeptime"]
                # the call went on throughout and answers from the new memory
                assert "Ada" in await spoken(call, "What is my name?")
                await call.close()
            finally:
                worker.stop()
                await ledger.close()
                if redis_server.proc is None:
                    redis_server.start()
    assert "1 published turns not yet processed go out again" in caplog.text


def _all_sent(ledger: Ledger) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        box = await ledger.outbox()
        return bool(box) and all(box.values())

    return check
