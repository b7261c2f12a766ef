"""Outbound calls and call records against a live gateway: the official `twilio` SDK places
the call on a loopback stand-in for Twilio's REST API (tests/support/fake_twilio_api.py);
the test then plays Twilio's part: it fetches our TwiML, connects the Media Stream with the
Twilio caller of tests/support/phone.py and hears the call's first_message; signed status
callbacks move the record; DELETE completes the call over REST. Every bad input is refused
with a clear status and nothing reaches Twilio."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from memory.usage import LimitOverrides
from tests.support.fake_llm import Reply
from tests.support.fake_twilio_api import FakeTwilioApi
from tests.support.phone import (
    TOKEN,
    PhoneGateway,
    TwilioCall,
    parse_twiml,
    phone_gateway,
    sign,
    transcribe_on,
)
from tests.support.servers import ServerThread, serve
from tests.support.speech import wer
from tests.support.webhook_receiver import Receiver

ACCOUNT = "AC" + "5" * 32
OURS = "+15005550006"  # the number calls come from
BOB = "+15551230000"  # the person called
FIRST = "Hello, this is the clinic calling about your appointment tomorrow."
HOOK_SECRET = "whsec-outbound"


@pytest.fixture(scope="module")
def twilio_api() -> Iterator[tuple[FakeTwilioApi, ServerThread]]:
    api = FakeTwilioApi(ACCOUNT, TOKEN)
    srv = ServerThread(api.app).start()
    try:
        yield api, srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def hooks() -> Iterator[tuple[Receiver, ServerThread]]:
    """The receiver of the gateway's signed `call.ended` webhooks."""
    receiver = Receiver(HOOK_SECRET)
    with serve(receiver.app) as srv:
        yield receiver, srv


@pytest.fixture(scope="module")
def phone(
    tmp_path_factory: pytest.TempPathFactory,
    twilio_api: tuple[FakeTwilioApi, ServerThread],
    hooks: tuple[Receiver, ServerThread],
) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("outbound") / "vg.db"
    overrides = {
        "twilio_account_sid": ACCOUNT,
        "twilio_api_url": twilio_api[1].url,
        "dial_out_allowlist": "+1555, +1415",
        "call_webhook_url": f"{hooks[1].url}/hook",
        "call_webhook_secret": HOOK_SECRET,
        "call_webhook_backoff_s": 0.05,
    }
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None, **overrides) as gw:
        yield gw


@pytest.fixture
def pg(phone: PhoneGateway, twilio_api: tuple[FakeTwilioApi, ServerThread]) -> PhoneGateway:
    phone.llm.queue.clear()
    phone.llm.requests.clear()
    phone.llm.responder = lambda body: Reply(text="Okay.")
    twilio_api[0].fail_create = None
    return phone


def user(pg: PhoneGateway, name: str) -> tuple[str, dict[str, str]]:
    """A user of the gateway: (user_id, its Authorization header)."""
    user_id, key = pg.server.call(pg.server.app.state.gw.memory.users.create(name))
    return user_id, {"Authorization": f"Bearer {key}"}


def outbound_form(sid: str, status: str = "in-progress") -> dict[str, str]:
    """What Twilio POSTs to the call's Url (and, with other statuses, its StatusCallback)."""
    return {
        "AccountSid": ACCOUNT,
        "ApiVersion": "2010-04-01",
        "CallSid": sid,
        "CallStatus": status,
        "Direction": "outbound-api",
        "From": OURS,
        "To": BOB,
    }


def reports_of(receiver: Receiver, call_id: str, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The verified `call.ended` reports the receiver got for `call_id` (waits for one)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [
            d.event["data"]
            for d in receiver.delivered()
            if d.verified and d.event["data"]["call"]["id"] == call_id
        ]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def post_signed(url: str, form: dict[str, str], token: str = TOKEN) -> httpx.Response:
    return httpx.post(url, data=form, headers={"X-Twilio-Signature": sign(url, form, token)})


async def wait_record(pg: PhoneGateway, call_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        record: dict[str, Any] = pg.http.get(f"/v1/calls/{call_id}").json()
        if record["status"] == status or time.monotonic() > deadline:
            return record
        await asyncio.sleep(0.1)


async def test_outbound_call(
    pg: PhoneGateway, twilio_api: tuple[FakeTwilioApi, ServerThread]
) -> None:
    api = twilio_api[0]
    agent_id = pg.agent(name="clinic")
    body = {"to": BOB, "from": OURS, "first_message": FIRST, "metadata": {"ticket": 7}}
    resp = pg.http.post(f"/v1/agents/{agent_id}/calls", json=body)
    assert resp.status_code == 201, resp.text
    record = resp.json()
    call_id = record["id"]
    assert call_id.startswith("call-") and resp.headers["location"] == f"/v1/calls/{call_id}"
    assert (record["direction"], record["transport"], record["status"]) == (
        "outbound",
        "twilio",
        "queued",
    )
    assert record["caller"] == BOB and record["metadata"] == {"ticket": 7}

    # what the SDK asked of Twilio
    (create,) = api.of("POST", f"/Accounts/{ACCOUNT}/Calls.json")
    assert (create.user, create.password) == (ACCOUNT, TOKEN)
    assert create.one("To") == BOB and create.one("From") == OURS
    url, status_url = create.one("Url"), create.one("StatusCallback")
    assert url.startswith(f"{pg.server.url}/v1/telephony/twilio/voice?")
    assert parse_qs(urlsplit(url).query) == {"agent_id": [agent_id], "call_id": [call_id]}
    assert status_url == f"{pg.server.url}/v1/telephony/twilio/status?call_id={call_id}"
    assert create.form["StatusCallbackEvent"] == ["initiated", "ringing", "answered", "completed"]
    sid = record["vendor_call_id"]
    assert sid in api.calls and "MachineDetection" not in create.form

    # Twilio's progress: ringing (a bad signature changes nothing)
    api.progress(sid, "ringing")
    assert post_signed(status_url, outbound_form(sid, "ringing")).status_code == 204
    bad = post_signed(status_url, outbound_form(sid, "busy"), token="not-the-token")
    assert bad.status_code == 403 and bad.json()["detail"] == "invalid X-Twilio-Signature"

    # the person answers: Twilio fetches our TwiML and connects the stream
    api.progress(sid, "in-progress")
    twiml = post_signed(url, outbound_form(sid))
    assert twiml.status_code == 200, twiml.text
    doc = parse_twiml(twiml.text)
    assert doc.parameters["call_id"] == call_id and doc.parameters["agent_id"] == agent_id
    call = await TwilioCall(doc.stream_url, sid, doc.parameters).connect()
    await call.begin()
    first_audio = await call.wait_media(timeout=40)
    await call.wait_quiet()
    heard = await transcribe_on(pg.server, call.audio(since=first_audio))
    words = heard.lower()
    assert "clinic" in words and "appointment" in words and wer(FIRST, heard) < 0.5, heard
    live = await wait_record(pg, call_id, "in-progress")
    assert [h["status"] for h in live["status_history"]] == ["queued", "ringing", "in-progress"]
    assert live["answered_at"] is not None

    # hang up over the API: Twilio's call is completed over REST, the stream closes
    resp = pg.http.delete(f"/v1/calls/{call_id}")
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed" and resp.json()["end_reason"] == "hung_up_by_api"
    (update,) = api.of("POST", f"/Calls/{sid}.json")
    assert update.form == {"Status": ["completed"]}
    assert api.calls[sid]["status"] == "completed"
    await call.wait_closed()
    # Twilio's own completed callback adds to the history; the outcome stays
    assert post_signed(status_url, outbound_form(sid, "completed")).status_code == 204
    await asyncio.sleep(0.3)  # the session's own end is recorded too
    done = pg.http.get(f"/v1/calls/{call_id}").json()
    assert done["status"] == "completed" and done["end_reason"] == "hung_up_by_api"
    assert done["status_history"][-1]["status"] == "completed" and done["ended_at"]
    assert done["conversation_id"]  # the person called talks in their own conversation
    listed = pg.http.get("/v1/calls/", params={"agent_id": agent_id, "caller": BOB}).json()
    assert [c["id"] for c in listed] == [call_id]
    # a second hang-up returns the record as it is; Twilio is not asked again
    assert pg.http.delete(f"/v1/calls/{call_id}").json()["ended_at"] == done["ended_at"]
    assert len(api.of("POST", f"/Calls/{sid}.json")) == 1


async def test_inbound_call_gets_a_record(pg: PhoneGateway) -> None:
    agent_id = pg.agent(name="front-desk")
    call = await pg.call(agent_id, call_sid="CA" + "7" * 32).connect()
    await call.begin()
    await asyncio.sleep(0.5)
    (live,) = pg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
    assert (live["direction"], live["transport"], live["status"]) == (
        "inbound",
        "twilio",
        "in-progress",
    )
    assert live["vendor_call_id"] == "CA" + "7" * 32
    await call.stop()
    await call.hang_up()
    ended = await wait_record(pg, live["id"], "completed")
    assert ended["status"] == "completed" and ended["end_reason"] == "caller_hung_up"
    assert ended["caller"] == "+14155550100" and ended["conversation_id"]
    assert (
        pg.http.get("/v1/calls/", params={"status": "in-progress", "agent_id": agent_id}).json()
        == []
    )


def test_outbound_bad_input(
    pg: PhoneGateway,
    twilio_api: tuple[FakeTwilioApi, ServerThread],
    hooks: tuple[Receiver, ServerThread],
) -> None:
    api = twilio_api[0]
    before = len(api.requests)
    agent_id = pg.agent(name="dialer")
    path = f"/v1/agents/{agent_id}/calls"
    for to in ("5551230000", "+1 555 123 0000", "+0555123", "tel:+15551230000", 15551230000):
        resp = pg.http.post(path, json={"to": to, "from": OURS})
        assert resp.status_code == 422 and "to" in resp.json()["detail"], (to, resp.text)
    resp = pg.http.post(path, json={"to": BOB})
    assert resp.status_code == 422 and "from" in resp.json()["detail"]
    resp = pg.http.post(path, json={"to": "+442071234567", "from": OURS})
    assert resp.status_code == 403 and "dial-out allowlist" in resp.json()["detail"]
    resp = pg.http.post(path, json={"to": BOB, "from": OURS, "machine_detection": "sometimes"})
    assert resp.status_code == 422 and "machine_detection" in resp.json()["detail"]
    resp = pg.http.post("/v1/agents/agent-nope/calls", json={"to": BOB, "from": OURS})
    assert resp.status_code == 404
    # another user's agent and calls are a 404 like unknown ones
    _, alice = user(pg, "alice")
    bob_id, bob = user(pg, "bob")
    gw = pg.server.app.state.gw  # (before bob's first request: limits are cached)
    pg.server.call(gw.quotas.usage.set_limits(bob_id, LimitOverrides(call_minutes=1)))
    pg.server.call(gw.quotas.usage.add_call_seconds(f"user:{bob_id}", 61))
    resp = pg.http.post(
        "/v1/agents/", json={"name": "alice-agent", "model": "openai/fake"}, headers=alice
    )
    alice_agent = resp.json()["id"]
    resp = pg.http.post(
        f"/v1/agents/{alice_agent}/calls", json={"to": BOB, "from": OURS}, headers=bob
    )
    assert resp.status_code == 404
    # bob is out of call minutes: 429, as the voice socket and WebRTC answer
    resp = pg.http.post(
        "/v1/agents/", json={"name": "bob-agent", "model": "openai/fake"}, headers=bob
    )
    resp = pg.http.post(
        f"/v1/agents/{resp.json()['id']}/calls", json={"to": BOB, "from": OURS}, headers=bob
    )
    assert resp.status_code == 429 and "call minutes" in resp.json()["detail"]
    assert len(api.requests) == before  # nothing refused reached Twilio

    resp = pg.http.post(
        f"/v1/agents/{alice_agent}/calls", json={"to": BOB, "from": OURS}, headers=alice
    )
    assert resp.status_code == 201
    call_id = resp.json()["id"]
    assert pg.http.get(f"/v1/calls/{call_id}", headers=bob).status_code == 404
    assert pg.http.delete(f"/v1/calls/{call_id}", headers=bob).status_code == 404
    assert pg.http.get("/v1/calls/", headers=bob).json() == []
    assert [c["id"] for c in pg.http.get("/v1/calls/", headers=alice).json()] == [call_id]
    assert (
        pg.http.get("/v1/calls/", params={"agent_id": alice_agent}, headers=bob).status_code == 404
    )
    assert pg.http.get("/v1/calls/call-nope").status_code == 404
    # status callbacks: bad signature 403, unknown call 404, unknown status 422
    url = f"{pg.server.url}/v1/telephony/twilio/status?call_id={call_id}"
    sid = resp.json()["vendor_call_id"]
    assert post_signed(url, outbound_form(sid, "busy"), token="wrong").status_code == 403
    assert httpx.post(url, data=outbound_form(sid, "busy")).status_code == 403  # unsigned
    nope = f"{pg.server.url}/v1/telephony/twilio/status?call_id=call-nope"
    assert post_signed(nope, outbound_form(sid, "busy")).status_code == 404
    assert post_signed(url, outbound_form(sid, "exploded")).status_code == 422
    assert pg.http.get(f"/v1/calls/{call_id}").json()["status"] == "queued"
    # the person is busy: the record ends with that reason
    assert post_signed(url, outbound_form(sid, "busy")).status_code == 204
    busy = pg.http.get(f"/v1/calls/{call_id}").json()
    assert (busy["status"], busy["end_reason"]) == ("busy", "busy") and busy["ended_at"]
    # a call that never connected gets its signed call.ended webhook here, once
    assert post_signed(url, outbound_form(sid, "completed")).status_code == 204
    (report,) = reports_of(hooks[0], call_id)
    assert report["call"]["end_reason"] == "busy" and report["transcript"] == []
    time.sleep(0.5)
    assert len(reports_of(hooks[0], call_id)) == 1


def test_twilio_refuses_the_call(
    pg: PhoneGateway, twilio_api: tuple[FakeTwilioApi, ServerThread]
) -> None:
    twilio_api[0].fail_create = 400
    agent_id = pg.agent(name="refused")
    resp = pg.http.post(f"/v1/agents/{agent_id}/calls", json={"to": BOB, "from": OURS})
    assert resp.status_code == 502 and "Twilio refused" in resp.json()["detail"]
    (record,) = pg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
    assert (record["status"], record["end_reason"]) == ("failed", "failed")


def test_machine_detection_and_recording_reach_twilio(
    pg: PhoneGateway, twilio_api: tuple[FakeTwilioApi, ServerThread]
) -> None:
    api = twilio_api[0]
    agent_id = pg.agent(name="amd")
    body = {"to": "+14155550123", "from": OURS, "machine_detection": "Enable", "record": True}
    resp = pg.http.post(f"/v1/agents/{agent_id}/calls", json=body)
    assert resp.status_code == 201, resp.text
    record = resp.json()
    assert record["options"] == {
        "first_message": None,
        "machine_detection": "Enable",
        "record": True,
    }
    create = api.of("POST", f"/Accounts/{ACCOUNT}/Calls.json")[-1]
    assert create.one("MachineDetection") == "Enable" and create.one("Record") == "true"
    # Twilio's answer: a machine; then the call ends with no one to talk to
    url = create.one("StatusCallback")
    form = {**outbound_form(record["vendor_call_id"], "in-progress"), "AnsweredBy": "machine_start"}
    form["To"] = body["to"]
    assert post_signed(url, form).status_code == 204
    form = {**form, "CallStatus": "completed"}
    assert post_signed(url, form).status_code == 204
    done = pg.http.get(f"/v1/calls/{record['id']}").json()
    assert done["metadata"] == {"answered_by": "machine_start"}
    assert (done["status"], done["end_reason"]) == ("completed", "completed")
    assert [h["status"] for h in done["status_history"]] == ["queued", "in-progress", "completed"]
