"""Scheduled messages (`agents.schedule.*`) with letta-client 1.12.1 in strict mode against a
live gateway on loopback (the fake OpenAI-compatible LLM answers): create, list, retrieve and
delete; bad input; a one-time schedule fires once as a background run and is gone; a recurring
one fires again and again; two gateways on one database fire each due schedule once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from letta_client import Letta, NotFoundError, UnprocessableEntityError
from sqlalchemy import update

from memory.orm import ScheduledMessage
from tests.integration.test_rest_letta_client import strict
from tests.support.fake_llm import FakeLLM
from tests.support.servers import ServerThread

FAST = {"schedule_tick_s": 0.1, "schedule_cron_seconds": True}  # cron down to the second


@pytest.fixture
def server(gateway_factory, db_url: str, fake_llm_url: str) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        database_url=db_url, openai_base_url=fake_llm_url, openai_api_key="test", **FAST
    )


def _client(server: ServerThread) -> Letta:
    return Letta(base_url=server.url, api_key="k", timeout=60, _strict_response_validation=True)


@pytest.fixture
def client(server: ServerThread) -> Iterator[Letta]:
    yield _client(server)


def ms_from_now(seconds: float) -> int:
    return int((time.time() + seconds) * 1000)


def wait_for(what: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := what():
            return result
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def completed_runs(client: Letta, agent_id: str) -> list[Any]:
    return [r for r in client.runs.list(agent_id=agent_id) if r.status == "completed"]


def test_create_list_retrieve_delete(client: Letta) -> None:
    agent = client.agents.create(model="openai/fake")
    at = ms_from_now(3600)
    once = client.agents.schedule.create(
        agent.id,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Up"}], "otid": "o-1"}],
        schedule={"type": "one-time", "scheduled_at": at},
        include_return_message_types=["assistant_message"],
        max_steps=3,
        callback_url="https://example.com/hook",
    )
    assert once.id and once.next_scheduled_at
    weekly = client.agents.schedule.create(
        agent.id,
        messages=[{"role": "system", "content": "Weekly review"}],
        schedule={"type": "recurring", "cron_expression": "0 9 * * MON"},
    )
    got = client.agents.schedule.retrieve(once.id, agent_id=agent.id)
    assert (got.id, got.agent_id, got.schedule.type) == (once.id, agent.id, "one-time")
    assert got.schedule.scheduled_at == at  # type: ignore[union-attr]
    assert got.next_scheduled_time == once.next_scheduled_at
    assert got.message.messages[0].content[0].text == "Up"  # type: ignore[union-attr]
    assert got.message.messages[0].otid == "o-1"
    assert got.message.include_return_message_types == ["assistant_message"]
    assert (got.message.max_steps, got.message.callback_url) == (3, "https://example.com/hook")
    rec = client.agents.schedule.retrieve(weekly.id, agent_id=agent.id)
    assert rec.schedule.type == "recurring"
    assert rec.schedule.cron_expression == "0 9 * * MON"  # type: ignore[union-attr]
    assert rec.next_scheduled_time and rec.next_scheduled_time.endswith("09:00:00+00:00")
    listed = client.agents.schedule.list(agent.id)
    assert [s.id for s in listed.scheduled_messages] == [once.id, weekly.id]
    assert not listed.has_next_page
    first = client.agents.schedule.list(agent.id, limit="1")
    assert [s.id for s in first.scheduled_messages] == [once.id] and first.has_next_page
    rest = client.agents.schedule.list(agent.id, after=once.id, limit="1")
    assert [s.id for s in rest.scheduled_messages] == [weekly.id] and not rest.has_next_page
    assert client.agents.schedule.delete(once.id, agent_id=agent.id).success is True
    with pytest.raises(NotFoundError):
        client.agents.schedule.retrieve(once.id, agent_id=agent.id)
    with pytest.raises(NotFoundError):
        client.agents.schedule.delete(once.id, agent_id=agent.id)
    assert [s.id for s in client.agents.schedule.list(agent.id).scheduled_messages] == [weekly.id]
    client.agents.delete(agent.id)  # its schedules go with it
    with pytest.raises(NotFoundError):
        client.agents.schedule.list(agent.id)


def test_bad_input_is_a_clear_4xx(client: Letta, server: ServerThread) -> None:
    agent = client.agents.create(model="openai/fake")
    other = client.agents.create(model="openai/fake")
    msgs: Any = [{"role": "user", "content": "hi"}]
    later: Any = {"scheduled_at": ms_from_now(600)}
    sid = client.agents.schedule.create(other.id, messages=msgs, schedule=later).id
    with pytest.raises(NotFoundError):
        client.agents.schedule.create("agent-nope", messages=msgs, schedule=later)
    with pytest.raises(NotFoundError):
        client.agents.schedule.list("agent-nope")
    for call in (client.agents.schedule.retrieve, client.agents.schedule.delete):
        with pytest.raises(NotFoundError):
            call("scheduled_message-nope", agent_id=agent.id)
        with pytest.raises(NotFoundError):  # another agent's schedule
            call(sid, agent_id=agent.id)
    with pytest.raises(NotFoundError):
        client.agents.schedule.list(agent.id, after="scheduled_message-nope")
    http = httpx.Client(base_url=server.url, timeout=30)
    url = f"/v1/agents/{agent.id}/schedule"
    cron = {"type": "recurring", "cron_expression": "61 * * * *"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"messages": msgs, "schedule": cron}, "minute: '61' is outside 0-59"),
        ({"messages": msgs, "schedule": {**cron, "cron_expression": "0 0 30 2 *"}}, "no time"),
        ({"messages": msgs, "schedule": {**cron, "cron_expression": ""}}, "empty"),
        ({"messages": msgs, "schedule": {"scheduled_at": ms_from_now(-5)}}, "in the past"),
        ({"messages": msgs, "schedule": {"scheduled_at": 1_700_000_000}}, "milliseconds"),
        ({"messages": [], "schedule": later}, "messages"),
        ({"messages": [{"role": "assistant", "content": "x"}], "schedule": later}, "user"),
        ({"messages": [{"role": "user", "content": "  "}], "schedule": later}, "text"),
        ({"messages": msgs}, "schedule"),
        ({"messages": msgs, "schedule": {"type": "recurring"}}, "cron_expression"),
        ({"messages": msgs, "schedule": later, "max_steps": 2.5}, "whole number"),
        ({"messages": msgs, "schedule": later, "max_steps": 0}, "max_steps"),
    ]
    for body, words in cases:
        resp = http.post(url, json=body)
        assert resp.status_code == 422, (body, resp.text)
        assert words in resp.json()["detail"], (body, resp.json())
    with pytest.raises(UnprocessableEntityError):
        client.agents.schedule.create(agent.id, messages=[], schedule=later)
    assert http.get(url, params={"limit": "0"}).status_code == 422
    assert http.post(url, content=b"{").status_code == 400
    assert client.agents.schedule.list(agent.id).scheduled_messages == []


def test_a_one_time_schedule_fires_once(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    made = client.agents.schedule.create(
        agent.id,
        messages=[{"role": "user", "content": "Time to stretch"}],
        schedule={"scheduled_at": ms_from_now(1.5)},
    )
    (run,) = wait_for(lambda: completed_runs(client, agent.id))
    assert run.background and run.stop_reason == "end_turn"
    messages = strict(client.runs.messages.list(run.id, order="asc"))
    assert [m.message_type for m in messages] == ["user_message", "assistant_message"]
    assert messages[0].content == "Time to stretch"  # type: ignore[union-attr]
    assert "Time to stretch" in str(messages[1].content)  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):  # a one-time schedule is gone once fired
        client.agents.schedule.retrieve(made.id, agent_id=agent.id)
    time.sleep(1.0)
    assert len(list(client.runs.list(agent_id=agent.id))) == 1


def test_a_recurring_schedule_fires_again_and_again(client: Letta, fake_llm: FakeLLM) -> None:
    agent = client.agents.create(model="openai/fake")
    made = client.agents.schedule.create(
        agent.id,
        messages=[{"role": "user", "content": "Tick"}],
        schedule={"type": "recurring", "cron_expression": "* * * * * *"},  # every second
    )
    before = client.agents.schedule.retrieve(made.id, agent_id=agent.id).next_scheduled_time
    runs = wait_for(lambda: len(r := completed_runs(client, agent.id)) >= 3 and r)
    assert len({r.id for r in runs}) == len(runs)
    after = client.agents.schedule.retrieve(made.id, agent_id=agent.id).next_scheduled_time
    assert after and before and after > before  # it stays, due next time
    client.agents.schedule.delete(made.id, agent_id=agent.id)
    time.sleep(1.5)  # a firing claimed just before the delete may still start
    settled = len(list(client.runs.list(agent_id=agent.id)))
    time.sleep(2.0)
    assert len(list(client.runs.list(agent_id=agent.id))) == settled  # deleted: no more


def test_times_missed_while_no_gateway_ran_are_sent_once(
    client: Letta, server: ServerThread, fake_llm: FakeLLM
) -> None:
    agent = client.agents.create(model="openai/fake")
    minute = (datetime.now(UTC).minute + 30) % 60  # hourly, not due again during the test
    made = client.agents.schedule.create(
        agent.id,
        messages=[{"role": "user", "content": "Hourly check"}],
        schedule={"type": "recurring", "cron_expression": f"{minute} * * * *"},
    )

    async def overdue() -> None:  # as if every gateway had been down for three hours
        async with server.app.state.gw.memory.db.write() as s:
            await s.execute(
                update(ScheduledMessage)
                .where(ScheduledMessage.id == made.id)
                .values(next_run_at=datetime.now(UTC) - timedelta(hours=3))
            )

    server.call(overdue())
    wait_for(lambda: completed_runs(client, agent.id))
    time.sleep(1.0)
    assert len(list(client.runs.list(agent_id=agent.id))) == 1
    nxt = client.agents.schedule.retrieve(made.id, agent_id=agent.id).next_scheduled_time
    assert nxt is not None
    when = datetime.fromisoformat(nxt)
    assert datetime.now(UTC) < when <= datetime.now(UTC) + timedelta(hours=1)
    assert (when.minute, when.second) == (minute, 0)


def test_two_gateways_on_one_database_fire_each_schedule_once(
    gateway_factory: Any, db_url: str, fake_llm_url: str, fake_llm: FakeLLM
) -> None:
    settings = {"openai_base_url": fake_llm_url, "openai_api_key": "t", **FAST}
    one = gateway_factory(database_url=db_url, **settings)
    two = gateway_factory(database_url=db_url, **settings)
    a, b = _client(one), _client(two)
    agents = [a.agents.create(model="openai/fake") for _ in range(2)]
    at = ms_from_now(2.0)  # all due at once, on both gateways' next tick
    for n, agent in enumerate(agents * 2):
        (a if n % 2 else b).agents.schedule.create(
            agent.id,
            messages=[{"role": "user", "content": f"Reminder {n}"}],
            schedule={"scheduled_at": at},
        )
    for agent in agents:
        wait_for(lambda agent=agent: len(completed_runs(a, agent.id)) >= 2)
        assert b.agents.schedule.list(agent.id).scheduled_messages == []
    time.sleep(1.0)  # a second firing would have started by now
    for agent in agents:
        runs = list(b.runs.list(agent_id=agent.id))
        assert len(runs) == 2, [r.id for r in runs]
        said = sorted(
            str(m.content)  # type: ignore[union-attr]
            for r in runs
            for m in a.runs.messages.list(r.id)
            if m.message_type == "user_message"
        )
        assert len(said) == 2 and len(set(said)) == 2  # each reminder once
