"""SIGTERM with a live phone call (docs/operations.md, "Graceful shutdown"):
a real `voice-gateway serve` process stops taking calls (/ready 503, a new media stream is
closed 1012) but keeps serving the phone call, which is answered during the drain; just before
VG_DRAIN_TIMEOUT_S runs out the caller hears a spoken goodbye (whole: Twilio's marks come back)
and only then is the stream closed (1000); the process exits."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import websockets

from tests.support.gateway_proc import GatewayProcess, base_env
from tests.support.phone import TwilioCall, upsample_16k
from voice_gateway.audio import ulaw_decode
from voice_gateway.stt.whisper import transcribe

DRAIN_S = 12.0


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_DRAIN_TIMEOUT_S=str(DRAIN_S),
        VG_IDLE_TIMEOUT_S="60",
    )
    gw = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        yield gw
    finally:
        gw.stop()


def goodbye_audio(call: TwilioCall) -> tuple[str, np.ndarray]:
    """The last audio item the gateway sent (its id, from the marks after each chunk)."""
    marks = [r.msg["mark"]["name"] for r in call.of_event("mark")]
    item = marks[-1].rpartition(":")[0]
    chunks, current = [], None
    for r in call.received:
        if r.msg.get("event") == "media":
            current = r
        elif r.msg.get("event") == "mark" and r.msg["mark"]["name"].startswith(item + ":"):
            assert current is not None
            chunks.append(current)

    pcm = [ulaw_decode(base64.b64decode(c.msg["media"]["payload"])) for c in chunks]
    return item, np.concatenate(pcm)


async def test_sigterm_keeps_the_phone_call_then_says_goodbye(gateway: GatewayProcess) -> None:
    agent = await asyncio.to_thread(
        httpx.post, f"{gateway.url}/v1/agents/", json={"name": "phone-line"}, timeout=30
    )
    assert agent.status_code == 201, agent.text
    media_url = f"{gateway.ws_url}/v1/telephony/twilio/media"
    params = {"agent_id": agent.json()["id"]}
    call = await TwilioCall(media_url, "CA" + "b" * 32, params).connect()
    await call.begin()
    await asyncio.sleep(1.0)
    t0 = time.monotonic()
    gateway.signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    # no new calls: not ready, and a new media stream is closed 1012
    ready = await asyncio.to_thread(httpx.get, f"{gateway.url}/ready", timeout=5)
    assert ready.status_code == 503
    late = await TwilioCall(media_url, "CA" + "c" * 32, params).connect()
    with contextlib.suppress(websockets.ConnectionClosed):  # it may be closed already
        await late.begin(line=False)
    assert await late.wait_closed(10) == 1012
    # the live call is still served: a keypad entry gets a spoken answer
    await call.dtmf("5")
    await call.dtmf("#")
    first = await call.wait_media(since=time.monotonic(), timeout=8)
    assert first - t0 < DRAIN_S - 6
    await asyncio.sleep(max(0.0, t0 + 3.0 - time.monotonic()))
    assert call.close_code is None  # not cut at SIGTERM
    code = await call.wait_closed(timeout=DRAIN_S + 5)
    closed_at = time.monotonic()
    assert code == 1000, (code, call.close_reason)
    assert closed_at - t0 <= DRAIN_S + 1.0, closed_at - t0
    item, pcm = goodbye_audio(call)
    heard = [r for r in call.received if r.msg.get("event") == "media"]
    goodbye_start = next(
        r.at
        for i, r in enumerate(call.received)
        if r.msg.get("event") == "mark" and r.msg["mark"]["name"].startswith(item + ":")
    )
    assert heard and goodbye_start - t0 > DRAIN_S - 8, goodbye_start - t0  # near the deadline
    duration = len(pcm) / 8000
    assert 1.5 < duration < 8, duration
    # the whole goodbye played before the close (Twilio plays in real time)
    assert closed_at >= goodbye_start + duration - 0.3, (closed_at - goodbye_start, duration)
    audio = np.frombuffer(upsample_16k(pcm), dtype="<i2").astype(np.float32) / 32768
    text = (await asyncio.to_thread(transcribe, audio, 2)).lower()
    assert "goodbye" in text.replace(" ", "") or "good bye" in text, text
    assert "call again" in text, text
    await call.hang_up()
    # uvicorn re-raises the captured SIGTERM once it has shut down
    assert gateway.wait(30) in (0, -signal.SIGTERM)
    log = gateway.log()
    assert "goodbye played" in log and "drained" in log, log
