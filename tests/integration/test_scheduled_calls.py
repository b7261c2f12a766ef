"""Scheduled calls: a schedule whose body carries `call` (the body of
`POST /v1/agents/{id}/calls`) places that call when it fires, through the official `twilio`
SDK on a loopback stand-in for Twilio's REST API (tests/support/fake_twilio_api.py). Checked
at creation as a placed call is (422 naming the field), and again when it fires: a refusal
leaves a failed call record and the scheduler goes on."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from memory.usage import LimitOverrides
from tests.support.fake_twilio_api import FakeTwilioApi, Recorded
from tests.support.servers import ServerThread

ACCOUNT = "AC" + "6" * 32
TOKEN = "twilio-scheduled-token"
OURS = "+15005550006"
BOB = "+15551230000"
FIRST = "Hello, this is the clinic calling to remind you of your appointment."
CREATE = f"/Accounts/{ACCOUNT}/Calls.json"


@pytest.fixture(scope="module")
def twilio_api() -> Iterator[tuple[FakeTwilioApi, ServerThread]]:
    api = FakeTwilioApi(ACCOUNT, TOKEN)
    srv = ServerThread(api.app).start()
    try:
        yield api, srv
    finally:
        srv.stop()


@pytest.fixture
def api(twilio_api: tuple[FakeTwilioApi, ServerThread]) -> FakeTwilioApi:
    twilio_api[0].fail_create = None
    twilio_api[0].requests.clear()
    return twilio_api[0]


@pytest.fixture
def server(gateway_factory, twilio_api: tuple[FakeTwilioApi, ServerThread]) -> ServerThread:  # type: ignore[no-untyped-def]
    return gateway_factory(  # type: ignore[no-any-return]
        schedule_tick_s=0.1,
        schedule_cron_seconds=True,
        twilio_account_sid=ACCOUNT,
        twilio_auth_token=TOKEN,
        twilio_api_url=twilio_api[1].url,
        dial_out_allowlist="+1555, +1415",
    )


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def agent(http: httpx.Client, headers: dict[str, str] | None = None) -> str:
    resp = http.post("/v1/agents/", json={"model": "openai/fake"}, headers=headers)
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["id"])


def user(server: ServerThread, name: str) -> tuple[str, dict[str, str]]:
    user_id, key = server.call(server.app.state.gw.memory.users.create(name))
    return user_id, {"Authorization": f"Bearer {key}"}


def ms_from_now(seconds: float) -> int:
    return int((time.time() + seconds) * 1000)


def wait_for(what: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := what():
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def creates(api: FakeTwilioApi) -> list[Recorded]:
    return api.of("POST", CREATE)


def test_a_one_time_schedule_places_a_call(
    server: ServerThread, http: httpx.Client, api: FakeTwilioApi
) -> None:
    agent_id = agent(http)
    call = {"to": BOB, "from": OURS, "first_message": FIRST, "metadata": {"ticket": 7}}
    body = {"schedule": {"scheduled_at": ms_from_now(1.0)}, "call": call}
    resp = http.post(f"/v1/agents/{agent_id}/schedule", json=body)
    assert resp.status_code == 200, resp.text
    sid = resp.json()["id"]
    stored = http.get(f"/v1/agents/{agent_id}/schedule/{sid}").json()["message"]
    assert stored["messages"] == [] and stored["call"]["to"] == BOB
    assert stored["call"]["from"] == OURS and "call_base_url" not in stored
    assert creates(api) == []  # not before its time

    (create,) = wait_for(lambda: creates(api))
    assert create.one("To") == BOB and create.one("From") == OURS
    url = create.one("Url")
    assert url.startswith(f"{server.url}/v1/telephony/twilio/voice?")
    query = parse_qs(urlsplit(url).query)
    call_id = query["call_id"][0]
    assert query["agent_id"] == [agent_id]
    record = wait_for(
        lambda: (r := http.get(f"/v1/calls/{call_id}").json())["vendor_call_id"] and r
    )
    assert (record["direction"], record["status"]) == ("outbound", "queued")
    assert record["options"]["first_message"] == FIRST and record["caller"] == BOB
    assert record["metadata"] == {"ticket": 7, "schedule_id": sid}
    assert record["vendor_call_id"] in api.calls
    # a one-time schedule is spent: gone, and placed once
    assert http.get(f"/v1/agents/{agent_id}/schedule/{sid}").status_code == 404
    time.sleep(0.5)
    assert len(creates(api)) == 1


def test_a_recurring_schedule_places_a_call_on_each_tick(
    http: httpx.Client, api: FakeTwilioApi
) -> None:
    agent_id = agent(http)
    cron = {"type": "recurring", "cron_expression": "* * * * * *"}  # every second
    body = {"schedule": cron, "call": {"to": "+14155550123", "from": OURS}}
    resp = http.post(f"/v1/agents/{agent_id}/schedule", json=body)
    assert resp.status_code == 200, resp.text
    sid = resp.json()["id"]
    placed = wait_for(lambda: len(creates(api)) >= 2 and creates(api))
    assert placed[1].at - placed[0].at > 0.5  # on its next tick, not twice at once
    assert http.delete(f"/v1/agents/{agent_id}/schedule/{sid}").status_code == 200
    time.sleep(0.3)
    count = len(creates(api))
    time.sleep(1.5)
    assert len(creates(api)) == count  # deleted: placed no more
    calls = http.get("/v1/calls/", params={"agent_id": agent_id}).json()
    assert len(calls) == count and {c["metadata"]["schedule_id"] for c in calls} == {sid}


def test_bad_input_at_creation(
    server: ServerThread, http: httpx.Client, api: FakeTwilioApi
) -> None:
    agent_id = agent(http)
    url = f"/v1/agents/{agent_id}/schedule"
    later = {"scheduled_at": ms_from_now(600)}
    ok = {"to": BOB, "from": OURS}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"call": {**ok, "to": "5551230000"}}, "call.to"),
        ({"call": {**ok, "to": "+1 555 123 0000"}}, "call.to"),
        ({"call": {**ok, "to": "+442071234567"}}, "call.to: the number is outside the dial-out"),
        ({"call": {"to": BOB}}, "call.from"),
        ({"call": {**ok, "machine_detection": "sometimes"}}, "call.machine_detection"),
        ({"call": {**ok, "caller": "  "}}, "call.caller"),
        ({"call": {**ok, "shoe_size": 9}}, "call.shoe_size"),
        ({"call": "+15551230000"}, "call"),
        (
            {"call": ok, "messages": [{"role": "user", "content": "hi"}]},
            "call: a schedule places a call or sends messages, not both",
        ),
        ({}, "messages"),
    ]
    for extra, words in cases:
        resp = http.post(url, json={"schedule": later, **extra})
        assert resp.status_code == 422, (extra, resp.text)
        assert words in resp.json()["detail"], (extra, resp.json())
    # another user's agent and schedules are a 404
    _, alice = user(server, "alice")
    _, mallory = user(server, "mallory")
    alice_agent = agent(http, alice)
    body = {"schedule": later, "call": ok}
    resp = http.post(f"/v1/agents/{alice_agent}/schedule", json=body, headers=alice)
    assert resp.status_code == 200, resp.text
    sid = resp.json()["id"]
    theirs = f"/v1/agents/{alice_agent}/schedule"
    assert http.post(theirs, json=body, headers=mallory).status_code == 404
    assert http.get(f"{theirs}/{sid}", headers=mallory).status_code == 404
    assert http.delete(f"{theirs}/{sid}", headers=mallory).status_code == 404
    assert http.get(f"{theirs}/{sid}", headers=alice).status_code == 200
    assert http.get(url).json()["scheduled_messages"] == []
    assert creates(api) == []  # nothing refused reached Twilio


def test_a_gateway_without_twilio_refuses_scheduled_calls(gateway_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bare: ServerThread = gateway_factory(database_url=f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    with httpx.Client(base_url=bare.url, timeout=30) as http:
        body = {"schedule": {"scheduled_at": ms_from_now(600)}, "call": {"to": BOB, "from": OURS}}
        resp = http.post(f"/v1/agents/{agent(http)}/schedule", json=body)
    assert resp.status_code == 422 and "call: outbound calls need" in resp.json()["detail"]


def test_refusals_at_fire_time_are_recorded_and_the_scheduler_goes_on(
    server: ServerThread, http: httpx.Client, api: FakeTwilioApi
) -> None:
    # Twilio refuses: the call record fails, the one-time schedule is spent
    api.fail_create = 400
    agent_id = agent(http)
    body = {"schedule": {"scheduled_at": ms_from_now(0.5)}, "call": {"to": BOB, "from": OURS}}
    sid = http.post(f"/v1/agents/{agent_id}/schedule", json=body).json()["id"]
    listed = lambda: http.get("/v1/calls/", params={"agent_id": agent_id}).json()  # noqa: E731
    (failed,) = wait_for(lambda: [c for c in listed() if c["status"] == "failed"])
    assert failed["end_reason"] == "failed" and failed["metadata"] == {"schedule_id": sid}
    assert len(creates(api)) == 1
    assert http.get(f"/v1/agents/{agent_id}/schedule/{sid}").status_code == 404

    # the owner is out of call minutes: refused before Twilio, recorded with its reason
    api.fail_create = None
    owner_id, owner = user(server, "owner")
    gw = server.app.state.gw
    server.call(gw.quotas.usage.set_limits(owner_id, LimitOverrides(call_minutes=1)))
    server.call(gw.quotas.usage.add_call_seconds(f"user:{owner_id}", 61))
    theirs = agent(http, owner)
    body["schedule"] = {"scheduled_at": ms_from_now(0.5)}
    resp = http.post(f"/v1/agents/{theirs}/schedule", json=body, headers=owner)
    quota_sid = resp.json()["id"]
    mine = lambda: http.get("/v1/calls/", params={"agent_id": theirs}, headers=owner).json()  # noqa: E731
    (refused,) = wait_for(mine)
    assert (refused["status"], refused["end_reason"]) == ("failed", "quota_exceeded")
    assert refused["metadata"] == {"schedule_id": quota_sid}
    assert len(creates(api)) == 1

    # the scheduler goes on: the next due call is placed
    body["schedule"] = {"scheduled_at": ms_from_now(0.5)}
    http.post(f"/v1/agents/{agent_id}/schedule", json=body)
    wait_for(lambda: [c for c in listed() if c["status"] == "queued" and c["vendor_call_id"]])
    assert len(creates(api)) == 2
