"""Post-call reports end to end: two callers on one agent talk over the browser socket (one
spoken turn with a tool call, one typed turn); each call's `call.ended` webhook reaches a
loopback receiver signed, once, carrying the report (record, transcript, per-turn latencies),
the same as `GET /v1/calls/{id}/report`, and neither report holds the other caller's words.
A receiver that never answers does not hold up the end of a call: its delivery is retried in
the background, then dropped."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from memory.webhooks import DeliveryData, WebhookStore
from tests.e2e.conftest import VoiceGateway, voice_gateway_stack
from tests.support.fake_llm import Reply, ToolCallSpec
from tests.support.servers import serve
from tests.support.speech import silence, speak
from tests.support.voice_client import VoiceClient
from tests.support.webhook_receiver import Delivery, Receiver

SECRET = "whsec-e2e"
LATENCIES = ("endpointing_ms", "stt_ms", "llm_ttft_ms", "tts_ttfb_ms", "voice_to_voice_ms")
SPOKEN = "I would like some apricot jam"
TYPED = "My secret word is blueberry."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VoiceGateway, Receiver]]:
    receiver = Receiver(SECRET, hang_s=3.0)
    with (
        serve(receiver.app) as hook,
        voice_gateway_stack(
            tmp_path_factory.mktemp("reports"),
            call_webhook_url=f"{hook.url}/hook",
            call_webhook_secret=SECRET,
            call_webhook_attempts=2,
            call_webhook_timeout_s=1.0,
            call_webhook_backoff_s=0.05,
        ) as vg,
    ):
        yield vg, receiver


async def delivered(receiver: Receiver, n: int, timeout: float = 30.0) -> list[Delivery]:
    deadline = time.monotonic() + timeout
    while len(receiver.delivered()) < n:
        assert time.monotonic() < deadline, f"{len(receiver.delivered())} of {n} delivered"
        await asyncio.sleep(0.05)
    return receiver.delivered()


async def test_reports_of_two_callers_on_one_agent(stack: tuple[VoiceGateway, Receiver]) -> None:
    vg, receiver = stack
    receiver.got.clear()
    agent_id = vg.agent(name="reports")
    alice, bob = VoiceClient(vg.ws(agent_id)), VoiceClient(vg.ws(agent_id))
    conv_a = (await (await alice.connect()).start(caller="report-alice"))["conversation_id"]
    await (await bob.connect()).send(  # Bob's call is recorded
        {"type": "session.start", "caller": "report-bob", "record": True}
    )
    conv_b = (await bob.wait_for("session.started"))["conversation_id"]
    assert conv_a != conv_b

    vg.llm.responder = lambda body: Reply(text="Noted.")
    search = {"pre_exec_msg": "One moment.", "convo_keyword_queries": ["jam"]}
    vg.llm.push(
        Reply(tool_calls=[ToolCallSpec("search_memory", search)]), Reply(text="Apricot it is.")
    )
    await alice.stream(np.concatenate([silence(300), speak(SPOKEN), silence(900)]), 16000)
    heard_a = await alice.wait_for("turn.metrics", timeout=60)
    said_a = alice.of_type("transcript.final")[0]["text"]
    await bob.send({"type": "input_text", "text": TYPED})
    heard_b = await bob.wait_for("turn.metrics", timeout=60)
    for c in (alice, bob):
        await c.send({"type": "session.end"})
        assert await c.wait_closed() == 1000

    got = await delivered(receiver, 2)
    assert all(d.verified for d in got) and len({d.event_id for d in got}) == 2
    reports = {d.event["data"]["call"]["conversation_id"]: d.event["data"] for d in got}
    a, b = reports[conv_a], reports[conv_b]
    for report, heard in ((a, heard_a), (b, heard_b)):
        call = report["call"]
        assert (call["agent_id"], call["transport"], call["status"]) == (
            agent_id, "browser", "completed",
        )  # fmt: skip
        assert call["end_reason"] == "caller_ended"
        recording = f"/v1/calls/{call['id']}/recording" if report is b else None
        assert report["recording"] == call["recording_url"] == recording
        (turn,) = report["turns"]  # the turn's figures, as the caller's client was told
        assert turn["turn_id"] == heard["turn_id"] and turn["stop_reason"] == "end_turn"
        for key in ("llm_ttft_ms", "tts_ttfb_ms", "voice_to_voice_ms"):
            assert turn[key] == heard[key] and turn[key] > 0, (key, turn)
        assert vg.http.get(f"/v1/calls/{call['id']}/report").json() == report

    for key in LATENCIES:
        assert a["turns"][0][key] == heard_a[key] and heard_a[key] >= 0, key
    roles = [e["role"] for e in a["transcript"]]
    assert roles == ["user", "assistant", "tool", "assistant"], a["transcript"]
    user, asked, result, reply = a["transcript"]
    assert user["text"] == said_a and reply["text"] == "Apricot it is."
    (tool_call,) = asked["tool_calls"]
    assert tool_call["name"] == "search_memory" and "jam" in tool_call["arguments"]
    assert (result["tool_name"], result["tool_call_id"]) == ("search_memory", tool_call["id"])
    assert [(e["role"], e["text"]) for e in b["transcript"]] == [
        ("user", TYPED), ("assistant", "Noted."),
    ]  # fmt: skip

    # each caller's words stay out of the other's report
    assert "blueberry" not in json.dumps(a).lower()
    assert "apricot" not in json.dumps(b).lower() and said_a.lower() not in json.dumps(b).lower()


async def test_a_receiver_that_never_answers_does_not_hold_the_call(
    stack: tuple[VoiceGateway, Receiver],
) -> None:
    vg, receiver = stack
    receiver.got.clear()
    receiver.script[:] = ["hang", "hang"]
    agent_id = vg.agent(name="unanswered")
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start()
    await c.send({"type": "input_text", "text": "hello there"})
    await c.wait_for("turn.metrics", timeout=60)
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    store = WebhookStore(vg.server.app.state.gw.memory.db)
    deadline = time.monotonic() + 10
    while not (records := vg.http.get("/v1/calls/", params={"agent_id": agent_id}).json())[0][
        "conversation_id"
    ]:  # the call has left the gateway once its record has its conversation
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    (record,) = records
    assert (record["status"], record["end_reason"]) == ("completed", "caller_ended")
    while not (queued := vg.server.call(store.of_call(record["id"]))):
        assert time.monotonic() < deadline  # queued as the call left
        await asyncio.sleep(0.02)
    assert queued[0].status == "pending"  # the call is over; its webhook waits on the receiver

    deadline = time.monotonic() + 30
    while True:
        rows: list[DeliveryData] = vg.server.call(store.of_call(record["id"]))
        if rows and rows[0].status != "pending":
            break
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.1)
    (row,) = rows
    assert (row.status, row.attempts, row.last_error) == ("dropped", 2, "ReadTimeout")
    assert [d.answered for d in receiver.got] == [None, None]  # both attempts arrived
    event: dict[str, Any] = receiver.got[0].event
    assert event["id"] == row.id and event["data"]["call"]["id"] == record["id"]
    assert receiver.got[0].verified and receiver.got[0].body == receiver.got[1].body


def test_report_needs_a_known_call(stack: tuple[VoiceGateway, Receiver]) -> None:
    vg, _ = stack
    resp = vg.http.get("/v1/calls/call-unknown/report")
    assert resp.status_code == 404 and "call-unknown" in resp.json()["detail"]
