"""Crash safety of the sleeptime workers (real worker processes, real Redis).

- SIGKILL in the middle of an entry (its rewrite done, not yet committed): another worker
  reclaims it; every turn is applied exactly once (no lost fact, no duplicate passage).
- SIGTERM: the current entry is finished and acknowledged, queued ones are released so another
  worker takes them at once (its claim idle time here is far longer than the test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.gateway import running_gateway
from tests.support.procs import WorkerProcess
from tests.support.sleeptime import Ledger, block, history, new_agent, say, wait_until

PAUSED = "test pause before committing the rewrite"
PEOPLE = [("Ada", "Lisbon"), ("Grace", "Arlington"), ("Alan", "Wilmslow")]


def turns(name: str, city: str) -> list[str]:
    return [
        f"Hello, my name is {name}.",
        f"I live in {city}.",
        "It is a quiet afternoon.",
        f"Remember that {name} likes long walks.",
        "Goodbye for now.",
    ]


@pytest.fixture
async def ledger(db_url: str) -> AsyncIterator[Ledger]:
    ledger = Ledger(db_url)
    yield ledger
    await ledger.close()


def pending_of(redis_url: str, consumer: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        for c in client.xinfo_consumers("vg:transcripts", "sleeptime"):
            if c["name"] in (consumer, consumer.encode()):
                return int(c["pending"])
        return 0
    finally:
        client.close()


async def test_sigkill_mid_entry_is_reclaimed_and_applied_once(
    db_url: str, redis_url: str, tmp_path: Path, ledger: Ledger
) -> None:
    fast_claim = {"VG_CLAIM_IDLE_MS": "1500"}
    doomed = WorkerProcess(
        db_url,
        redis_url,
        tmp_path / "doomed.log",
        consumer="doomed",
        env={**fast_claim, "VG_SLEEPTIME_TEST_DELAY_S": "600"},
    )
    rescuer = WorkerProcess(
        db_url, redis_url, tmp_path / "rescuer.log", consumer="rescuer", env=fast_claim
    )
    with running_gateway(db_url, redis_url=redis_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            agents = [await new_agent(http, name) for name, _ in PEOPLE]
            doomed.start()
            try:
                for i in range(5):  # interleaved, as live traffic is
                    for agent, (name, city) in zip(agents, PEOPLE, strict=True):
                        await say(http, agent, turns(name, city)[i])
                doomed.wait_for_log(PAUSED)
                # the doomed worker ran a rewrite and dies before committing it: nothing of it
                # may be visible, so the rescuer's run is the only one that counts
                doomed.kill()
                for agent in agents:
                    assert (await block(http, agent))["metadata"]["version"] == 1
                    assert await ledger.passages(agent) == []
                assert pending_of(redis_url, "doomed") >= 1  # it died holding entries
                rescuer.start()
                await wait_until(ledger.all_processed, "every turn processed by the rescuer")
            finally:
                doomed.stop()
                rescuer.stop()

            assert "reclaimed" in rescuer.log_text()
            assert pending_of(redis_url, "doomed") == 0
            for agent, (name, city) in zip(agents, PEOPLE, strict=True):
                human = (await block(http, agent))["value"]
                assert f"Name: {name}" in human and f"Location: {city}" in human
                assert f"- {name} likes long walks" in human
                # one rewrite per agent, even for those whose rewrite ran twice
                assert [c["actor"] for c in await history(http, agent)] == ["sleeptime"]
                passages = await ledger.passages(agent)
                assert len(passages) == 1, passages  # the repeat replaced, never duplicated
                assert f"user: I live in {city}." in passages[0][0]
    assert await ledger.unprocessed() == set()


async def test_sigterm_finishes_the_current_entry_and_releases_the_rest(
    sqlite_url: str, redis_url: str, tmp_path: Path
) -> None:
    slow_claim = {"VG_CLAIM_IDLE_MS": "600000"}  # only a release hands entries over in time
    first = WorkerProcess(
        sqlite_url,
        redis_url,
        tmp_path / "first.log",
        consumer="first",
        concurrency=1,
        env={**slow_claim, "VG_SLEEPTIME_TEST_DELAY_S": "2"},
    )
    second = WorkerProcess(
        sqlite_url, redis_url, tmp_path / "second.log", consumer="second", env=slow_claim
    )
    ledger = Ledger(sqlite_url)
    with running_gateway(sqlite_url, redis_url=redis_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=60) as http:
            ada, grace = await new_agent(http, "ada"), await new_agent(http, "grace")
            first.start()
            try:
                for text in turns("Ada", "Lisbon"):
                    await say(http, ada, text)
                first.wait_for_log(PAUSED)
                for text in turns("Grace", "Arlington"):  # queued behind the stalled entry
                    await say(http, grace, text)

                async def holding_all() -> bool:
                    return pending_of(redis_url, "first") == 6

                await wait_until(holding_all, "the first worker to hold Grace's turns")
                assert first.terminate() == 0
                log = first.log_text()
                assert "released 5 queued entries" in log and "stopped" in log
                second.start()
                await wait_until(ledger.all_processed, "every turn processed")
            finally:
                first.stop()
                second.stop()
                await ledger.close()
            assert "Name: Ada" in (await block(http, ada))["value"]  # finished by `first`
            assert "Name: Grace" in (await block(http, grace))["value"]  # done by `second`
            assert "reclaimed 5 idle entries" in second.log_text()
