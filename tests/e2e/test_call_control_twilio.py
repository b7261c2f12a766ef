"""Call control over the real Twilio wire: a Media Stream of tests/support/phone.py and the
official `twilio` SDK against the loopback REST stand-in (tests/support/fake_twilio_api.py),
which records when each request came. The caller presses '#' (a turn of its own) and the
scripted model answers with a call tool:

- end_call: the goodbye is sent whole and its last mark comes back BEFORE the REST request
  that completes the call; the stream closes 1000; the record says `agent_ended`; the turn
  is stored complete.
- transfer_call (cold): the call is moved to <Dial> the allowed number only after the
  announcement's marks came back; the record says `transferred`; the call is not completed.
- a failed dial is a tool error the model reads, and the call goes on.
- send_dtmf: the tones go out in-band on the stream and decode (Goertzel) to the digits."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.fake_twilio_api import FakeTwilioApi, Recorded
from tests.support.phone import TOKEN, PhoneGateway, TwilioCall, phone_gateway
from tests.support.servers import ServerThread
from tests.unit.test_dtmf import decode
from voice_gateway.audio import ulaw_decode

ACCOUNT = "AC" + "7" * 32
OURS = "+15005550006"
CALLER = "+14155550100"
DESK = "+15551230000"
GOODBYE = "Thank you for calling. Goodbye and have a lovely day."
ANNOUNCE = "I am transferring you to the front desk now."


@pytest.fixture(scope="module")
def twilio_api() -> Iterator[tuple[FakeTwilioApi, ServerThread]]:
    api = FakeTwilioApi(ACCOUNT, TOKEN)
    srv = ServerThread(api.app).start()
    try:
        yield api, srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def phone(
    tmp_path_factory: pytest.TempPathFactory, twilio_api: tuple[FakeTwilioApi, ServerThread]
) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("callctl") / "vg.db"
    overrides = {"twilio_account_sid": ACCOUNT, "twilio_api_url": twilio_api[1].url}
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None, **overrides) as gw:
        yield gw


@pytest.fixture
def api(twilio_api: tuple[FakeTwilioApi, ServerThread]) -> FakeTwilioApi:
    twilio_api[0].fail_update = None
    twilio_api[0].requests.clear()
    return twilio_api[0]


@pytest.fixture
def pg(phone: PhoneGateway) -> PhoneGateway:
    phone.llm.queue.clear()
    phone.llm.requests.clear()
    phone.llm.responder = lambda body: Reply(text="Okay.")
    return phone


async def answered(pg: PhoneGateway, api: FakeTwilioApi, agent_id: str, sid: str) -> TwilioCall:
    """A call that came in (known to Twilio's API), its stream up, the caller pressing '#'."""
    api.inbound(sid, CALLER, OURS)
    call = await pg.call(agent_id, sid).connect()
    await call.begin()
    await call.dtmf("#")
    return call


def updates(api: FakeTwilioApi, sid: str) -> list[Recorded]:
    return api.of("POST", f"/Calls/{sid}.json")


async def record(pg: PhoneGateway, agent_id: str) -> dict[str, Any]:
    """The agent's one call record, once it has ended."""
    deadline = time.monotonic() + 10
    while True:
        items = pg.http.get("/v1/calls/", params={"agent_id": agent_id}).json()
        if (items and items[0].get("end_reason")) or time.monotonic() > deadline:
            assert len(items) == 1, items
            return dict(items[0])
        await asyncio.sleep(0.1)


def loud_marks(call: TwilioCall, until: float) -> list[str]:
    """The mark names that follow media with sound in it (not kept-up silence), sent before
    `until`: media and its mark alternate on the stream."""
    names, loud = [], False
    for r in call.received:
        if r.at >= until:
            break
        if r.msg.get("event") == "media":
            pcm = ulaw_decode(base64.b64decode(r.msg["media"]["payload"]))
            loud = bool(np.abs(pcm.astype(np.int32)).max(initial=0) > 1000)
        elif r.msg.get("event") == "mark" and loud:
            names.append(r.msg["mark"]["name"])
    return names


async def test_end_call_plays_the_goodbye_then_completes_the_call(
    pg: PhoneGateway, api: FakeTwilioApi
) -> None:
    agent_id = pg.agent(name="desk")
    end = ToolCallSpec("end_call", {"reason": "the caller is done"})
    pg.llm.push(Reply(text=GOODBYE, tool_calls=[end]))
    sid = "CA" + "e" * 32
    call = await answered(pg, api, agent_id, sid)
    assert await call.wait_closed(40) == 1000
    (done,) = updates(api, sid)
    assert done.one("Status") == "completed" and done.user == ACCOUNT
    heard = loud_marks(call, done.at)
    assert heard, "no goodbye audio before the hang-up"
    # the goodbye was sent whole: nothing with sound came after the hang-up request
    assert not any(r.at > done.at for r in call.of_event("media"))
    goodbye_ms = int(heard[-1].rpartition(":")[2])
    assert goodbye_ms > 1500  # a sentence of speech, not a blip
    # every mark of the goodbye (to its last frame) came back before the hang-up request
    sent = [r.msg["mark"]["name"] for r in call.of_event("mark")]
    echoed = dict((name, at) for at, name in call.echoed)
    assert sent and all(name in echoed and echoed[name] < done.at for name in sent)
    rec = await record(pg, agent_id)
    assert rec["end_reason"] == "agent_ended"
    kinds = [(m["message_type"], m.get("content") or "") for m in pg.messages(agent_id)]
    assert ("assistant_message", GOODBYE) in kinds
    tool = [m for m in pg.messages(agent_id) if m["message_type"] == "tool_return_message"]
    assert tool and tool[0]["status"] == "success" and tool[0]["name"] == "end_call"
    assert len(pg.llm.requests) == 1  # end_call ends the turn: the model is not asked again


async def test_cold_transfer_dials_the_allowed_number_after_the_announcement(
    pg: PhoneGateway, api: FakeTwilioApi
) -> None:
    agent_id = pg.agent(name="desk", transfer_targets={"front desk": DESK})
    transfer = ToolCallSpec("transfer_call", {"target": "front desk", "summary": "A refund."})
    pg.llm.push(Reply(text=ANNOUNCE, tool_calls=[transfer]))
    sid = "CA" + "f" * 32
    call = await answered(pg, api, agent_id, sid)
    offered = pg.llm.requests
    assert await call.wait_closed(40) == 1000
    tools = {t["function"]["name"]: t["function"] for t in offered[0]["tools"]}
    assert {"end_call", "transfer_call", "send_dtmf"} <= set(tools)
    assert DESK not in str(tools)  # the model is offered the name, never the number
    (moved,) = updates(api, sid)
    assert "Status" not in moved.form  # moved, not hung up
    assert moved.one("Twiml").endswith(f"<Response><Dial>{DESK}</Dial></Response>")
    heard = loud_marks(call, moved.at)
    assert int(heard[-1].rpartition(":")[2]) > 1500  # the announcement
    echoed = dict((name, at) for at, name in call.echoed)
    assert heard[-1] in echoed and echoed[heard[-1]] < moved.at
    assert (await record(pg, agent_id))["end_reason"] == "transferred"


async def test_a_failed_dial_is_a_tool_error_and_the_call_goes_on(
    pg: PhoneGateway, api: FakeTwilioApi
) -> None:
    api.fail_update = 400
    agent_id = pg.agent(name="desk", transfer_targets={"front desk": DESK})
    transfer = ToolCallSpec("transfer_call", {"target": "front desk"})
    pg.llm.push(Reply(text="One moment.", tool_calls=[transfer]), Reply(text="Sorry, no luck."))
    sid = "CA" + "d" * 32
    call = await answered(pg, api, agent_id, sid)
    await call.wait_until(lambda: len(pg.llm.requests) >= 2, 30, "for the model's second step")
    told = pg.llm.requests[1]["messages"][-1]
    assert told["role"] == "tool" and "the transfer to front desk failed" in told["content"]
    await asyncio.sleep(1.0)
    assert call.close_code is None  # the call goes on
    await call.stop()
    await call.wait_closed(20)
    assert (await record(pg, agent_id))["end_reason"] == "caller_hung_up"


async def test_send_dtmf_plays_the_tones_in_band(pg: PhoneGateway, api: FakeTwilioApi) -> None:
    agent_id = pg.agent(name="menu")
    pg.llm.push(
        Reply(tool_calls=[ToolCallSpec("send_dtmf", {"digits": "41w#"})]), Reply(text="Done.")
    )
    sid = "CA" + "c" * 32
    call = await answered(pg, api, agent_id, sid)
    await call.wait_until(lambda: len(pg.llm.requests) >= 2, 30, "for the model's second step")
    await call.wait_quiet(0.6, 30)
    keys = decode(call.audio(), 8000)
    assert keys.startswith("41#"), keys
    assert updates(api, sid) == []  # tones in-band, nothing over REST
    await call.hang_up()


async def test_warm_transfer_briefs_the_person_then_joins_the_caller(
    pg: PhoneGateway, api: FakeTwilioApi
) -> None:
    agent_id = pg.agent(name="desk", transfer_targets={"front desk": DESK})
    args = {"target": "front desk", "mode": "warm", "summary": "The caller wants a refund."}
    pg.llm.push(Reply(text=ANNOUNCE, tool_calls=[ToolCallSpec("transfer_call", args)]))
    sid = "CA" + "b" * 32
    call = await answered(pg, api, agent_id, sid)
    assert await call.wait_closed(40) == 1000
    room = f'<Conference endConferenceOnExit="true">transfer-{sid}</Conference>'
    (leg,) = api.of("POST", "/Calls.json")
    assert (leg.one("To"), leg.one("From")) == (DESK, OURS)  # from our number on the call
    assert leg.one("Twiml").endswith(
        f"<Response><Say>The caller wants a refund.</Say><Dial>{room}</Dial></Response>"
    )
    (moved,) = updates(api, sid)
    assert moved.one("Twiml").endswith(f"<Response><Dial>{room}</Dial></Response>")
    assert leg.at < moved.at  # the person is called first; then the caller joins
    assert (await record(pg, agent_id))["end_reason"] == "transferred"
