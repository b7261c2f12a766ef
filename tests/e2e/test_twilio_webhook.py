"""The Twilio voice webhook: TwiML built with the twilio library, and X-Twilio-Signature
checked with twilio's RequestValidator (the test signs with twilio's own validator)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from tests.support.phone import TOKEN, PhoneGateway, call_form, phone_gateway, sign

CALL_SID = "CA" + "9" * 32


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoneGateway]:
    db = tmp_path_factory.mktemp("twiml") / "vg.db"
    with phone_gateway(f"sqlite+aiosqlite:///{db}", None) as gw:
        yield gw


def test_twiml_connects_a_stream_with_the_agent_parameter(pg: PhoneGateway) -> None:
    agent_id = pg.agent()
    resp = pg.webhook(agent_id, CALL_SID)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/xml")
    root = ET.fromstring(resp.text)
    assert root.tag == "Response" and [c.tag for c in root] == ["Connect"]
    (stream,) = list(root.find("Connect") or [])
    assert stream.tag == "Stream"
    assert stream.attrib["url"] == f"{pg.server.ws_url}/v1/telephony/twilio/media"
    params = {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}
    assert params["agent_id"] == agent_id and params["token"]  # token: the media socket's auth


def test_signature_is_checked(pg: PhoneGateway) -> None:
    agent_id = pg.agent()
    url = f"{pg.webhook_url}?agent_id={agent_id}"
    form = call_form(CALL_SID)
    right = sign(url, form)
    assert pg.http.post(url, data=form, headers={"X-Twilio-Signature": right}).status_code == 200
    wrong_token = sign(url, form, token="not-the-token")
    for headers in ({"X-Twilio-Signature": wrong_token}, {}):
        resp = pg.http.post(url, data=form, headers=headers)
        assert resp.status_code == 403 and "X-Twilio-Signature" in resp.json()["detail"]
    tampered = {**form, "From": "+19995550199"}  # a parameter changed after signing
    resp = pg.http.post(url, data=tampered, headers={"X-Twilio-Signature": right})
    assert resp.status_code == 403
    other_url = f"{pg.webhook_url}?agent_id={pg.agent()}"  # signature of another URL
    resp = pg.http.post(other_url, data=form, headers={"X-Twilio-Signature": right})
    assert resp.status_code == 403


def test_public_url_behind_a_proxy(pg: PhoneGateway) -> None:
    settings = pg.server.app.state.gw.settings
    agent_id = pg.agent()
    form = call_form(CALL_SID)
    local = f"{pg.webhook_url}?agent_id={agent_id}"
    public = f"https://voice.example.com/v1/telephony/twilio/voice?agent_id={agent_id}"
    settings.public_url = "https://voice.example.com"
    try:
        ok = pg.http.post(local, data=form, headers={"X-Twilio-Signature": sign(public, form)})
        assert ok.status_code == 200, ok.text
        stream = ET.fromstring(ok.text).find("./Connect/Stream")
        assert stream is not None
        assert stream.attrib["url"] == "wss://voice.example.com/v1/telephony/twilio/media"
        bad = pg.http.post(local, data=form, headers={"X-Twilio-Signature": sign(local, form)})
        assert bad.status_code == 403
    finally:
        settings.public_url = None
    # without VG_PUBLIC_URL, a proxy's X-Forwarded-Proto gives the scheme Twilio signed
    https = local.replace("http://", "https://")
    resp = pg.http.post(
        local,
        data=form,
        headers={"X-Twilio-Signature": sign(https, form), "X-Forwarded-Proto": "https"},
    )
    assert resp.status_code == 200
    stream = ET.fromstring(resp.text).find("./Connect/Stream")
    assert stream is not None and stream.attrib["url"].startswith("wss://")


def test_webhook_bad_input(pg: PhoneGateway) -> None:
    form = call_form(CALL_SID)
    url = pg.webhook_url
    resp = pg.http.post(url, data=form, headers={"X-Twilio-Signature": sign(url, form)})
    assert resp.status_code == 400 and "agent_id" in resp.json()["detail"]
    url = f"{pg.webhook_url}?agent_id=agent-missing"
    resp = pg.http.post(url, data=form, headers={"X-Twilio-Signature": sign(url, form)})
    assert resp.status_code == 404 and "agent" in resp.json()["detail"]


def test_keyed_gateway_refuses_unsigned_webhooks(pg: PhoneGateway) -> None:
    """With VG_API_KEY set, the webhook (which issues media-stream tokens) must be signed."""
    settings = pg.server.app.state.gw.settings
    agent_id = pg.agent()
    settings.twilio_auth_token, settings.api_key = None, "some-key"
    try:
        resp = pg.http.post(f"{pg.webhook_url}?agent_id={agent_id}", data=call_form(CALL_SID))
        assert resp.status_code == 403 and "VG_TWILIO_AUTH_TOKEN" in resp.json()["detail"]
    finally:
        settings.twilio_auth_token, settings.api_key = TOKEN, None
