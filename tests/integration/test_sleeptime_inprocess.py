"""Without VG_REDIS_URL the gateway runs the sleeptime agent itself, fed from the database
outbox: text turns (REST and chat completions) are rewritten into memory, and turns that were
stored but not yet applied when the process stopped are applied after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx

from memory.ids import utcnow
from memory.models import TranscriptEvent
from memory.service import Memory
from tests.support.gateway import running_gateway
from tests.support.sleeptime import Ledger, block, history, new_agent, say, wait_until


def stored_turn(agent_id: str, user: str, *, call_ended: bool = False) -> TranscriptEvent:
    now = utcnow()
    return TranscriptEvent(
        event_id=f"evt-{uuid.uuid4()}",
        agent_id=agent_id,
        conversation_id=None,  # the default conversation
        turn_id=f"turn-{uuid.uuid4()}",
        source="voice",
        user_text=user,
        agent_text="Okay." if user else "",
        agent_text_heard="Okay." if user else "",
        started_at=now,
        ended_at=now,
        call_ended=call_ended,
    )


async def test_rest_and_chat_completion_turns_rewrite_memory_in_process(db_url: str) -> None:
    ledger = Ledger(db_url)
    with running_gateway(db_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agent = await new_agent(http)
            for text in ("My name is Ada.", "I live in Lisbon.", "Nice weather.", "Hmm."):
                await say(http, agent, text)
            resp = await http.post(
                "/v1/chat/completions",
                json={"model": agent, "messages": [{"role": "user", "content": "Bye!"}]},
            )
            assert resp.status_code == 200, resp.text

            async def rewritten() -> bool:
                return (await block(http, agent))["metadata"]["version"] == 2

            await wait_until(rewritten, "the in-process rewrite")
            human = (await block(http, agent))["value"]
            assert human == "Name: Ada\nLocation: Lisbon"
            assert [c["actor"] for c in await history(http, agent)] == ["sleeptime"]
            await wait_until(ledger.all_processed, "every turn processed")
            assert sorted((await ledger.sources()).values()) == ["text"] * 5

            # the history route's errors
            missing = await http.get(f"/v1/agents/{agent}/core-memory/blocks/nope/history")
            assert missing.status_code == 404 and "nope" in missing.json()["detail"]
            gone = await http.get("/v1/agents/agent-nope/core-memory/blocks/human/history")
            assert gone.status_code == 404
            bad = await http.get(
                f"/v1/agents/{agent}/core-memory/blocks/human/history", params={"limit": "x"}
            )
            assert bad.status_code in (400, 422)
    await ledger.close()


async def test_a_restart_loses_no_stored_turn(db_url: str, tmp_path: Path) -> None:
    with running_gateway(db_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agent = await new_agent(http)
            await say(http, agent, "My name is Ada.")
            await say(http, agent, "I live in Lisbon.")
    # turns stored (with their outbox rows) just before the process died, never applied
    memory = await Memory.open(db_url)
    try:
        await memory.finish_turn(stored_turn(agent, "Remember that I like jazz."))
        await memory.finish_turn(stored_turn(agent, "", call_ended=True))  # the call ended
        assert await memory.outbox.depth() == 2
    finally:
        await memory.close()

    ledger = Ledger(db_url)
    with running_gateway(db_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            await wait_until(ledger.all_processed, "the stored turns applied after the restart")
            human = (await block(http, agent))["value"]
            # the end of the call made the rewrite due after three turns (not five)
            assert human == "Name: Ada\nLocation: Lisbon\n- I like jazz"
            passages = await ledger.passages(agent)
            assert len(passages) == 1 and "user: Remember that I like jazz." in passages[0][0]
    await ledger.close()
