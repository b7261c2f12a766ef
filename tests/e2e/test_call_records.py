"""Every call has a record: a browser call over the voice socket is recorded as it starts
(inbound, browser, in-progress) and as it ends (completed, its conversation); DELETE
/v1/calls/{id} hangs up a browser call live on this gateway (close 1000)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.e2e.conftest import VoiceGateway
from tests.support.voice_client import VoiceClient


async def _records(vg: VoiceGateway, agent_id: str, status: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        found: list[dict[str, Any]] = vg.http.get(
            "/v1/calls/", params={"agent_id": agent_id, "status": status}
        ).json()
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.1)


async def test_browser_call_record_and_hang_up(vg: VoiceGateway) -> None:
    agent_id = vg.agent(name="records")
    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start()
    (live,) = await _records(vg, agent_id, "in-progress")
    assert (live["direction"], live["transport"]) == ("inbound", "browser")
    assert live["answered_at"] and live["ended_at"] is None and live["vendor_call_id"] is None
    resp = vg.http.delete(f"/v1/calls/{live['id']}")
    assert resp.status_code == 200, resp.text
    assert (resp.json()["status"], resp.json()["end_reason"]) == ("completed", "hung_up_by_api")
    assert await c.wait_closed() == 1000
    deadline = time.monotonic() + 15  # the API's hang-up is recorded at once, the call's
    while time.monotonic() < deadline:  # conversation when the session has left
        (ended,) = await _records(vg, agent_id, "completed")
        if ended["conversation_id"]:
            break
        await asyncio.sleep(0.1)
    assert ended["id"] == live["id"] and ended["end_reason"] == "hung_up_by_api"
    assert ended["conversation_id"]  # filled in when the call left
    # an ended call that is not live anywhere: DELETE returns it as it is
    assert vg.http.delete(f"/v1/calls/{live['id']}").json()["ended_at"] == ended["ended_at"]

    c = await VoiceClient(vg.ws(agent_id)).connect()
    await c.start()
    await c.send({"type": "session.end"})
    assert await c.wait_closed() == 1000
    deadline = time.monotonic() + 15
    while len(await _records(vg, agent_id, "completed")) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    second, _ = await _records(vg, agent_id, "completed")
    assert second["id"] != live["id"] and second["end_reason"] == "caller_ended"
