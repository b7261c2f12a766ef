"""Sleeptime over Redis, end to end: text turns -> outbox -> vg:transcripts -> a real worker
process rewrites `human` -> pub/sub -> a live voice call gets memory.updated and its next
reply uses the new block. On SQLite (WAL file shared by the processes) and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis

from tests.support.gateway import running_gateway
from tests.support.procs import running_workers
from tests.support.sleeptime import Ledger, block, history, new_agent, say, wait_until
from tests.support.voice_client import VoiceClient

TURNS = [
    "Hi, my name is Ada Lovelace.",
    "I live in Lisbon, by the river.",
    "The weather is lovely today.",
    "Please remember that I take my tea without sugar.",
    "That is all for now.",
]


async def test_five_text_turns_rewrite_human_for_a_live_call(
    db_url: str, redis_url: str, tmp_path: Path
) -> None:
    with (
        running_gateway(db_url, redis_url=redis_url, voice=True) as gw,
        running_workers(db_url, redis_url, tmp_path, n=1) as (worker,),
    ):
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agent = await new_agent(http)
            call = await VoiceClient(f"{gw.ws_url}/v1/agents/{agent}/voice").connect()
            await call.start()
            for text in TURNS[:4]:
                await say(http, agent, text)
            assert (await block(http, agent))["value"] == ""  # 4 turns: not due yet
            await say(http, agent, TURNS[4])

            notice = await call.wait_for("memory.updated", timeout=60, label="human")
            human = await block(http, agent)
            assert notice["version"] == human["metadata"]["version"] == 2
            assert "Name: Ada Lovelace" in human["value"]
            assert "Location: Lisbon" in human["value"]
            assert "- I take my tea without sugar" in human["value"]
            changes = await history(http, agent)
            assert [(c["version"], c["actor"]) for c in changes] == [(2, "sleeptime")]
            assert changes[0]["old_value"] == "" and changes[0]["new_value"] == human["value"]
            passages = (await http.get(f"/v1/agents/{agent}/archival-memory")).json()
            assert len(passages) == 1 and "user: I live in Lisbon" in passages[0]["text"]

            # the call's next turn is answered from the rewritten block
            await call.send({"type": "input_text", "text": "What is my name?"})
            done = await call.wait_for("response.done", timeout=60)
            reply = call.wait_for("response.text.done", item_id=done["item_id"])
            assert "Ada Lovelace" in (await reply)["text"]
            await call.close()

            # every turn (and the end of the call) left the outbox and was applied exactly once
            ledger = Ledger(db_url)
            try:

                async def settled() -> bool:  # 5 text turns + 1 spoken + the end of the call
                    return len(await ledger.outbox()) == 7 and await ledger.all_processed()

                await wait_until(settled, "every turn and the call end processed")
                assert all((await ledger.outbox()).values())
                sources = sorted((await ledger.sources()).values())
                assert sources == ["text"] * 5 + ["voice"] * 2  # the spoken turn, the call end
            finally:
                await ledger.close()
        assert "memory rewritten" in worker.log_text()
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.xlen("vg:transcripts") == 7
        assert client.xlen("vg:transcripts:dead") == 0
        assert client.xpending("vg:transcripts", "sleeptime")["pending"] == 0
    finally:
        client.close()
