"""A user edits `human` while the sleeptime worker (a real process) rewrites it: no update is
lost, whoever loses the race retries on the new version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.support.fake_llm import FakeLLM, Reply
from tests.support.gateway import running_gateway
from tests.support.procs import WorkerProcess
from tests.support.sleeptime import (
    Gate,
    block,
    history,
    new_agent,
    say,
    scripted_reply,
    transcript_of,
    wait_until,
)


async def test_user_and_sleeptime_edits_of_human_both_land(
    db_url: str, redis_url: str, fake_llm: FakeLLM, fake_llm_url: str, tmp_path: Path
) -> None:
    gate = Gate()
    seen: list[str] = []  # the memory block as each rewrite run saw it

    def responder(body: dict[str, Any]) -> Reply:
        if transcript_of(body) and body["messages"][-1]["role"] == "user":
            seen.append(body["messages"][0]["content"])
            if not gate.arrived.is_set():
                gate.hold()  # the memory model has read `human` and is still thinking
        return scripted_reply(body)

    fake_llm.responder = responder
    worker = WorkerProcess(
        db_url,
        redis_url,
        tmp_path / "worker.log",
        env={
            "OPENAI_BASE_URL": fake_llm_url,
            "OPENAI_API_KEY": "test",
            "VG_SLEEPTIME_MODEL": "openai/fake",
            "VG_SLEEPTIME_EVERY_TURNS": "1",
        },
    )
    with running_gateway(db_url, redis_url=redis_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agent = await new_agent(http)
            url = f"/v1/agents/{agent}/core-memory/blocks/human"
            worker.start()
            try:
                # 1. the user's PATCH lands while the rewrite is in flight: sleeptime retries
                await say(http, agent, "I live in Lisbon.")
                await gate.wait_arrived()
                resp = await http.patch(url, json={"value": "Name: Ada\nAllergy: peanuts"})
                assert resp.status_code == 200 and resp.json()["metadata"]["version"] == 2
                gate.open()

                async def rewritten() -> bool:
                    return (await block(http, agent))["metadata"]["version"] == 3

                await wait_until(rewritten, "the sleeptime rewrite")
                human = await block(http, agent)
                assert human["value"] == "Name: Ada\nAllergy: peanuts\nLocation: Lisbon"
                changes = await history(http, agent)
                assert [(c["version"], c["actor"]) for c in changes] == [
                    (3, "sleeptime"),
                    (2, "user"),
                ]
                assert changes[0]["old_value"] == "Name: Ada\nAllergy: peanuts"
                # its commit found version 2, so the rewrite ran again on the user's text
                assert len(seen) == 2 and "Allergy" not in seen[0] and "Allergy" in seen[1]
                assert "changed during the rewrite; redoing it" in worker.log_text()

                # 2. the user edits a version sleeptime already replaced: 409, then a retry
                stale = (await block(http, agent))["metadata"]["version"]
                await say(http, agent, "Remember that I play the cello.")
                await wait_until(
                    lambda: _version_above(http, agent, stale), "the second sleeptime rewrite"
                )
                edit = {"value": human["value"] + "\nPet: a cat named Tom"}
                resp = await http.patch(url, json=edit, headers={"If-Match": str(stale)})
                assert resp.status_code == 409, resp.text
                assert "version" in resp.json()["detail"]
                fresh = await block(http, agent)
                resp = await http.patch(
                    url,
                    json={"value": fresh["value"] + "\nPet: a cat named Tom"},
                    headers={"If-Match": str(fresh["metadata"]["version"])},
                )
                assert resp.status_code == 200, resp.text
            finally:
                gate.open()
                worker.stop()
            final = (await block(http, agent))["value"]
            for fact in ("Allergy: peanuts", "Location: Lisbon", "- I play the cello", "Pet: a"):
                assert fact in final
            assert [c["actor"] for c in await history(http, agent)] == [
                "user",
                "sleeptime",
                "sleeptime",
                "user",
            ]


async def _version_above(http: httpx.AsyncClient, agent: str, version: int) -> bool:
    return int((await block(http, agent))["metadata"]["version"]) > version
