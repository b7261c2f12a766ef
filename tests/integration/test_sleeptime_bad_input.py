"""Bad input for a worker process: malformed and foreign stream entries, an unknown agent, an
agent deleted while its memory is being rewritten, a turn whose rewrite keeps failing. Each is
dead-lettered or skipped with a log line, and the worker keeps serving good turns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import running_gateway
from tests.support.procs import WorkerProcess
from tests.support.sleeptime import (
    Gate,
    Ledger,
    block,
    new_agent,
    say,
    scripted_reply,
    transcript_of,
    wait_until,
)

STREAM, DEAD = "vg:transcripts", "vg:transcripts:dead"


def unknown_agent_event() -> str:
    now = datetime.now(UTC).isoformat()
    return json.dumps(
        {
            "event_id": "evt-for-nobody",
            "agent_id": "agent-does-not-exist",
            "turn_id": "turn-x",
            "source": "text",
            "user_text": "my name is Nobody",
            "agent_text": "hi",
            "agent_text_heard": "hi",
            "started_at": now,
            "ended_at": now,
        }
    )


async def test_bad_entries_are_dead_lettered_or_skipped_and_the_worker_goes_on(
    sqlite_url: str, redis_url: str, fake_llm: FakeLLM, fake_llm_url: str, tmp_path: Path
) -> None:
    gate = Gate()

    def responder(body: dict[str, Any]) -> Reply:
        transcript = transcript_of(body)
        if "POISON" in transcript:
            return Reply(fail_status=500)  # the memory model keeps failing for this turn
        if "GATE" in transcript and not gate.arrived.is_set():
            gate.hold()  # the agent is deleted while this run waits for its model
        return scripted_reply(body)

    fake_llm.responder = responder
    worker = WorkerProcess(
        sqlite_url,
        redis_url,
        tmp_path / "worker.log",
        consumer="w1",
        env={
            "OPENAI_BASE_URL": fake_llm_url,
            "OPENAI_API_KEY": "test",
            "VG_SLEEPTIME_MODEL": "openai/fake",
            "VG_SLEEPTIME_EVERY_TURNS": "1",
            "VG_CLAIM_IDLE_MS": "1000",
            "VG_MAX_DELIVERIES": "3",
        },
    )
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    ledger = Ledger(sqlite_url)
    with running_gateway(sqlite_url, redis_url=redis_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            doomed, poisoned, good = [await new_agent(http, n) for n in ("d", "p", "g")]
            worker.start()
            try:
                r.xadd(STREAM, {"event": "this is not JSON"})
                r.xadd(STREAM, {"event": json.dumps({"agent_id": doomed, "turn": 1})})
                r.xadd(STREAM, {"payload": "an entry some other program wrote"})
                r.xadd(STREAM, {"event": unknown_agent_event()})

                await say(http, poisoned, "POISON my name is Pat.")
                await say(http, doomed, "GATE my name is Dora.")
                await gate.wait_arrived()
                assert (await http.delete(f"/v1/agents/{doomed}")).status_code in (200, 204)
                gate.open()

                await say(http, good, "My name is Gus and I live in Oslo.")

                async def four_dead_and_good_done() -> bool:
                    human = (await block(http, good))["value"]
                    return r.xlen(DEAD) == 4 and "Name: Gus" in human

                await wait_until(four_dead_and_good_done, "dead letters and the good turn")
                log = worker.wait_for_log("was deleted while")
                assert worker.alive
            finally:
                worker.stop()
                await ledger.close()
            errors = {e[1].get("event", e[1].get("payload")): e[1]["error"] for e in r.xrange(DEAD)}
            assert errors["this is not JSON"].startswith("malformed entry")
            assert errors["an entry some other program wrote"].startswith("foreign entry")
            assert len([e for e in errors.values() if e.startswith("malformed entry")]) == 2
            poison = next(e for k, e in errors.items() if k and "POISON" in k)
            assert "sleeptime run failed" in poison  # the model's error, after 3 deliveries
            assert "for unknown agent agent-does-not-exist" in log
            assert r.xpending(STREAM, "sleeptime")["pending"] == 0  # nothing left stuck
            assert "Name: Pat" not in (await block(http, poisoned))["value"]
            assert (await http.get(f"/v1/agents/{doomed}")).status_code == 404
