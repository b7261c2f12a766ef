"""Bad input on the Twilio media socket: each is dropped with a log line (the call goes on)
or closes the stream cleanly with a named code; never a traceback to the peer."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.fake_llm import Reply
from tests.support.phone import PhoneGateway, TwilioCall, pcm_to_ulaw, phone_gateway
from tests.support.speech import silence, speak, wer

HELLO = "Hello there, could you tell me what time the shop opens tomorrow?"
TWILIO_LOG = "voice_gateway.protocol.twilio"


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("phone-bad") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None) as gw:
        yield gw


@pytest.fixture
def pg(phone: PhoneGateway, caplog: pytest.LogCaptureFixture) -> Iterator[PhoneGateway]:
    phone.llm.queue.clear()
    phone.llm.requests.clear()
    phone.llm.responder = lambda body: Reply(text="The shop opens at nine.")
    caplog.set_level(logging.INFO)
    yield phone
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]  # nothing crashed on the server


def warnings(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("voice_gateway") and r.levelno >= logging.WARNING
    )


async def spoken_turn_works(pg: PhoneGateway, call: TwilioCall) -> None:
    """The call is alive: a spoken question gets transcribed and answered."""
    n = len(pg.llm.requests)
    end = await call.say(np.concatenate([speak(HELLO, 8000), silence(200, 8000)]))
    await call.wait_media(since=end, timeout=40)
    assert len(pg.llm.requests) == n + 1
    asked = pg.llm.requests[n]["messages"][-1]["content"]
    assert wer(HELLO, asked) <= 0.25, asked


async def test_media_before_start_is_dropped(
    pg: PhoneGateway, caplog: pytest.LogCaptureFixture
) -> None:
    call = await pg.call(pg.agent()).connect()
    await call.connected()
    early = pcm_to_ulaw(speak("What is the weather like on the planet Mars today?", 8000))
    for i in range(0, len(early), 160):
        await call.send(call.media_message(early[i : i + 160]))
    await call.begin()
    await spoken_turn_works(pg, call)
    assert len(pg.llm.requests) == 1 and "mars" not in str(pg.llm.requests[0]["messages"]).lower()
    assert "'media' before start ignored" in warnings(caplog)
    await call.stop()
    assert await call.wait_closed() == 1000


async def test_garbage_after_start_is_dropped_and_the_call_goes_on(
    pg: PhoneGateway, caplog: pytest.LogCaptureFixture
) -> None:
    call = await pg.call(pg.agent()).connect()
    await call.begin()
    await call.send({"event": "mystery", "streamSid": call.stream_sid})
    await call.send(
        {"event": "media", "streamSid": call.stream_sid, "media": {"payload": "%%%not base64"}}
    )
    await call.send({"event": "media", "streamSid": call.stream_sid, "media": "nope"})
    await call.send({"event": "dtmf", "dtmf": {"digit": "hello"}})
    await call.send({"event": "mark", "mark": {"name": 42}})
    await call.send_raw("this is not json")
    await call.send_raw(json.dumps(["an", "array"]))
    await call.send_raw(b"\x00\x01binary")
    await spoken_turn_works(pg, call)
    logged = warnings(caplog)
    for expected in (
        "unknown event 'mystery' ignored",
        "media with bad base64 dropped",
        "dtmf without a valid digit",
        "not JSON",
        "without an event",
        "binary frame ignored",
    ):
        assert expected in logged, expected
    assert not pg.llm.requests[0]["messages"][-1]["content"].startswith("[The caller")
    await call.stop()
    assert await call.wait_closed() == 1000


@pytest.mark.parametrize(
    "media_format",
    [
        {"encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1},
        {"encoding": "audio/x-mulaw", "sampleRate": 16000, "channels": 1},
        {"encoding": "audio/x-mulaw", "sampleRate": "eight thousand"},
        "audio/x-mulaw",
    ],
)
async def test_wrong_media_format_closes_1003(
    pg: PhoneGateway, caplog: pytest.LogCaptureFixture, media_format: object
) -> None:
    call = pg.call(pg.agent())
    call.media_format = media_format  # type: ignore[assignment]
    await call.connect()
    await call.begin(line=False)
    assert await call.wait_closed() == 1003
    assert call.close_reason == "mediaFormat must be audio/x-mulaw 8000 mono"
    assert not call.received
    assert "unsupported mediaFormat" in warnings(caplog)


@pytest.mark.parametrize("params", [{}, {"token": "x"}, None, {"agent_id": None}])
async def test_missing_agent_id_closes_1008(
    pg: PhoneGateway, caplog: pytest.LogCaptureFixture, params: dict[str, str | None] | None
) -> None:
    call = await TwilioCall(
        f"{pg.server.ws_url}/v1/telephony/twilio/media", "CA1", params or {}
    ).connect()
    msg = call.start_message()
    if params is None:
        del msg["start"]["customParameters"]
    await call.connected()
    await call.send(msg)
    assert await call.wait_closed() == 1008
    assert call.close_reason == "missing agent_id parameter" and not call.received
    assert "start without an agent_id parameter" in warnings(caplog)


async def test_bad_token_closes_4401_and_deleted_agent_4404(
    pg: PhoneGateway, caplog: pytest.LogCaptureFixture
) -> None:
    agent_id = pg.agent()
    call = pg.call(agent_id)
    forged = TwilioCall(call.url, call.call_sid, {"agent_id": agent_id, "token": "forged.token"})
    await forged.connect()
    await forged.begin(line=False)
    assert await forged.wait_closed() == 4401 and forged.close_reason == "invalid session token"
    other = pg.call(pg.agent())  # a real token, for another agent
    stolen = TwilioCall(call.url, call.call_sid, {**other.parameters, "agent_id": agent_id})
    await stolen.connect()
    await stolen.begin(line=False)
    assert await stolen.wait_closed() == 4401
    assert "twilio media stream rejected" in warnings(caplog)
    assert pg.http.delete(f"/v1/agents/{agent_id}").status_code in (200, 204)
    await call.connect()  # the webhook ran, then the agent was deleted
    await call.begin(line=False)
    assert await call.wait_closed() == 4404 and call.close_reason == "agent not found"


async def test_stop_before_start_closes_1000(pg: PhoneGateway) -> None:
    call = await pg.call(pg.agent()).connect()
    await call.connected()
    await call.stop()
    assert await call.wait_closed() == 1000 and not call.received


async def test_a_stream_never_started_closes_1001(pg: PhoneGateway) -> None:
    settings = pg.server.app.state.gw.settings  # type: ignore[attr-defined]
    settings.idle_timeout_s = 1.0
    try:
        call = await pg.call(pg.agent()).connect()
        await call.connected()
        assert await call.wait_closed(timeout=10) == 1001
        assert call.close_reason == "no start message" and not call.received
    finally:
        settings.idle_timeout_s = 20.0
