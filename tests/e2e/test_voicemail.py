"""Voicemail on outbound calls against a live gateway, on Twilio's real wire: the official
`twilio` SDK places the call on a loopback stand-in for Twilio's REST API
(tests/support/fake_twilio_api.py) and the Twilio caller of tests/support/phone.py answers
it. A machine (an espeak greeting, then a 1 kHz beep) gets the agent's voicemail message after
its beep (or, without one, after a silence) and the call is completed over REST (end reason
`voicemail`); a person saying "Hello?" is talked to; an inbound call's beep-like tone is
nothing. Twilio's async AMD callback is signed and checked, and tells a live call it reached a
machine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

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
from tests.support.servers import ServerThread
from tests.support.speech import silence, speak

ACCOUNT = "AC" + "7" * 32
OURS = "+15005550006"
SAM = "+15551239999"
GREETING = "Hi, you've reached Sam, please leave a message after the tone."
MESSAGE = "Hello Sam, this is the dental clinic. Please call us back about your appointment."


@pytest.fixture(scope="module")
def twilio() -> Iterator[tuple[FakeTwilioApi, ServerThread]]:
    api = FakeTwilioApi(ACCOUNT, TOKEN)
    srv = ServerThread(api.app).start()
    try:
        yield api, srv
    finally:
        srv.stop()


@pytest.fixture
def twilio_api(twilio: tuple[FakeTwilioApi, ServerThread]) -> FakeTwilioApi:
    return twilio[0]


@pytest.fixture(scope="module")
def pg(
    tmp_path_factory: pytest.TempPathFactory, twilio: tuple[FakeTwilioApi, ServerThread]
) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("voicemail") / "vg.db"
    overrides = {"twilio_account_sid": ACCOUNT, "twilio_api_url": twilio[1].url}
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None, **overrides) as gw:
        gw.llm.responder = lambda body: Reply(text="Hi, this is the clinic.")
        yield gw


def beep(ms: int = 500, hz: float = 1000.0) -> np.ndarray:
    t = np.arange(8 * ms) / 8000
    return (0.3 * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def form(sid: str, **extra: str) -> dict[str, str]:
    base = {"AccountSid": ACCOUNT, "CallSid": sid, "CallStatus": "in-progress"}
    return {**base, "Direction": "outbound-api", "From": OURS, "To": SAM, **extra}


def post_signed(url: str, data: dict[str, str], token: str = TOKEN) -> httpx.Response:
    return httpx.post(url, data=data, headers={"X-Twilio-Signature": sign(url, data, token)})


async def answer(
    pg: PhoneGateway, api: FakeTwilioApi, agent_id: str
) -> tuple[dict[str, Any], TwilioCall]:
    """Place an outbound call (with Twilio's AMD asked) and answer it: (record, the stream)."""
    body = {"to": SAM, "from": OURS, "machine_detection": "Enable"}
    resp = pg.http.post(f"/v1/agents/{agent_id}/calls", json=body)
    assert resp.status_code == 201, resp.text
    record = resp.json()
    sid = record["vendor_call_id"]
    create = api.of("POST", f"/Accounts/{ACCOUNT}/Calls.json")[-1]
    assert create.one("MachineDetection") == "Enable" and create.one("AsyncAmd") == "true"
    amd_url = f"{pg.server.url}/v1/telephony/twilio/amd?call_id={record['id']}"
    assert create.one("AsyncAmdStatusCallback") == amd_url
    api.progress(sid, "in-progress")
    twiml = post_signed(create.one("Url"), form(sid))
    assert twiml.status_code == 200, twiml.text
    doc = parse_twiml(twiml.text)
    call = await TwilioCall(doc.stream_url, sid, doc.parameters).connect()
    await call.begin()
    return record, call


async def wait_record(
    pg: PhoneGateway, call_id: str, ok: Any, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        record: dict[str, Any] = pg.http.get(f"/v1/calls/{call_id}").json()
        if ok(record) or time.monotonic() > deadline:
            return record
        await asyncio.sleep(0.1)


async def test_a_machine_gets_the_voicemail_message_after_its_beep(
    pg: PhoneGateway, twilio_api: FakeTwilioApi
) -> None:
    pg.llm.requests.clear()
    agent_id = pg.agent(name="dental", voicemail_message=MESSAGE)
    assert pg.http.get(f"/v1/agents/{agent_id}").json()["voicemail_message"] == MESSAGE
    record, call = await answer(pg, twilio_api, agent_id)
    sid = record["vendor_call_id"]
    greeting = speak(GREETING, rate=8000)
    beep_end = await call.say(
        np.concatenate([silence(600, 8000), greeting, silence(300, 8000), beep()])
    )
    first = await call.wait_media(timeout=60)
    assert first > beep_end, "the message began before the beep was over"
    assert await call.wait_closed(timeout=60) == 1000
    heard = (await transcribe_on(pg.server, call.audio(since=first))).lower()
    assert "clinic" in heard and "appointment" in heard, heard
    assert not pg.llm.requests  # the machine was not talked to
    done = await wait_record(pg, record["id"], lambda r: r["end_reason"] == "voicemail")
    assert done["status"] == "completed" and done["end_reason"] == "voicemail", done
    found = done["metadata"]["voicemail"]
    assert found["answered_by"] == "machine" and found["detected_by"] in ("phrase", "beep")
    assert found["greeting_end"] == "beep" and found["message_left"] is True
    (update,) = twilio_api.of("POST", f"/Calls/{sid}.json")
    assert update.form == {"Status": ["completed"]}

    # Twilio's AMD verdict: signed, one of its values, then on the record
    amd_url = f"{pg.server.url}/v1/telephony/twilio/amd?call_id={record['id']}"
    bad = post_signed(amd_url, form(sid, AnsweredBy="machine_end_beep"), token="not-the-token")
    assert bad.status_code == 403 and bad.json()["detail"] == "invalid X-Twilio-Signature"
    odd = post_signed(amd_url, form(sid, AnsweredBy="robot"))
    assert odd.status_code == 422 and "AnsweredBy must be one of" in odd.json()["detail"]
    ok = post_signed(amd_url, form(sid, AnsweredBy="machine_end_beep"))
    assert ok.status_code == 204, ok.text
    assert pg.http.get(f"/v1/calls/{record['id']}").json()["metadata"]["answered_by"] == (
        "machine_end_beep"
    )


async def test_a_person_is_talked_to(pg: PhoneGateway, twilio_api: FakeTwilioApi) -> None:
    pg.llm.requests.clear()
    agent_id = pg.agent(name="dental-2", voicemail_message=MESSAGE)
    record, call = await answer(pg, twilio_api, agent_id)
    said = await call.say(np.concatenate([silence(400, 8000), speak("Hello?", rate=8000)]))
    first = await call.wait_media(since=said, timeout=60)
    await call.wait_quiet()
    heard = (await transcribe_on(pg.server, call.audio(since=first))).lower()
    assert "clinic" in heard and "appointment" not in heard, heard
    assert pg.llm.requests  # the reply came from the agent
    found = await wait_record(pg, record["id"], lambda r: "voicemail" in r["metadata"])
    assert found["metadata"]["voicemail"] == {"answered_by": "human", "detected_by": "first_words"}
    assert call.close_code is None  # the call goes on
    assert pg.http.delete(f"/v1/calls/{record['id']}").json()["end_reason"] == "hung_up_by_api"
    await call.wait_closed()


async def test_an_inbound_call_is_never_a_machine(pg: PhoneGateway) -> None:
    pg.llm.requests.clear()
    agent_id = pg.agent(name="dental-3", voicemail_message=MESSAGE)
    call = pg.call(agent_id, "CA" + "3" * 32)
    await call.connect()
    await call.begin()
    lines = [silence(300, 8000), speak(GREETING, rate=8000), silence(300, 8000), beep(800)]
    said = await call.say(np.concatenate(lines))
    first = await call.wait_media(since=said - 1.0, timeout=60)
    await call.wait_quiet()
    heard = (await transcribe_on(pg.server, call.audio(since=first))).lower()
    assert "clinic" in heard and "appointment" not in heard, heard
    assert call.close_code is None
    (record,) = pg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
    assert record["direction"] == "inbound" and "voicemail" not in record["metadata"]
    await call.hang_up()


def test_voicemail_message_is_checked(pg: PhoneGateway) -> None:
    long = "x" * 2001
    resp = pg.http.post("/v1/agents/", json={"model": "openai/fake", "voicemail_message": long})
    assert resp.status_code == 422 and "voicemail_message" in str(resp.json()["detail"])
    agent_id = pg.agent(name="dental-4")
    assert pg.http.get(f"/v1/agents/{agent_id}").json()["voicemail_message"] is None
    resp = pg.http.patch(f"/v1/agents/{agent_id}", json={"voicemail_message": long})
    assert resp.status_code == 422 and "voicemail_message" in str(resp.json()["detail"])
    resp = pg.http.patch(f"/v1/agents/{agent_id}", json={"voicemail_message": "Call me back."})
    assert resp.status_code == 200 and resp.json()["voicemail_message"] == "Call me back."
    resp = pg.http.patch(f"/v1/agents/{agent_id}", json={"voicemail_message": None})
    assert resp.status_code == 200 and resp.json()["voicemail_message"] is None


async def test_twilio_amd_tells_a_live_call(pg: PhoneGateway, twilio_api: FakeTwilioApi) -> None:
    """A silent line: Twilio's AnsweredBy alone makes the machine and ends its greeting."""
    pg.llm.requests.clear()
    agent_id = pg.agent(name="dental-5", voicemail_message=MESSAGE)
    record, call = await answer(pg, twilio_api, agent_id)
    sid = record["vendor_call_id"]
    amd_url = f"{pg.server.url}/v1/telephony/twilio/amd?call_id={record['id']}"
    await wait_record(pg, record["id"], lambda r: r["status"] == "in-progress")
    await asyncio.sleep(0.5)  # the stream has started
    assert post_signed(amd_url, form(sid, AnsweredBy="machine_start")).status_code == 204
    await asyncio.sleep(1.0)
    assert not call.of_event("media")  # its greeting is still playing: nothing is said
    ended = time.monotonic()
    assert post_signed(amd_url, form(sid, AnsweredBy="machine_end_beep")).status_code == 204
    first = await call.wait_media(timeout=60)
    assert first > ended
    assert await call.wait_closed(timeout=60) == 1000
    heard = (await transcribe_on(pg.server, call.audio(since=first))).lower()
    assert "clinic" in heard and "appointment" in heard, heard
    done = await wait_record(pg, record["id"], lambda r: r["end_reason"] == "voicemail")
    assert done["end_reason"] == "voicemail" and not pg.llm.requests
    assert done["metadata"]["answered_by"] == "machine_end_beep"
    assert done["metadata"]["voicemail"] == {
        "answered_by": "machine",
        "detected_by": "twilio",
        "detail": "machine_start",
        "greeting_end": "twilio",
        "message_left": True,
    }


async def test_a_machine_without_a_beep_gets_the_message_after_a_silence(
    pg: PhoneGateway, twilio_api: FakeTwilioApi
) -> None:
    pg.llm.requests.clear()
    agent_id = pg.agent(name="dental-6", voicemail_message=MESSAGE)
    record, call = await answer(pg, twilio_api, agent_id)
    text = "Sorry, Sam is not available. Please leave a message."
    said = await call.say(np.concatenate([silence(400, 8000), speak(text, rate=8000)]))
    first = await call.wait_media(timeout=60)
    assert first > said + 2.4  # the machine's silence, counted from its words
    assert await call.wait_closed(timeout=60) == 1000
    done = await wait_record(pg, record["id"], lambda r: r["end_reason"] == "voicemail")
    found = done["metadata"]["voicemail"]
    assert (found["detected_by"], found["greeting_end"]) == ("phrase", "silence"), found
    assert not pg.llm.requests
