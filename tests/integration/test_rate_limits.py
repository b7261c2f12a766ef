"""Rate limits and quotas against live gateways: REST bursts get 429 + Retry-After and
recover; calls over the concurrent limit and out of minutes are closed 4429 (mid-call after a
`quota_exceeded` error); with Redis two gateways share one budget and one set of call slots,
and a killed gateway's call frees its slot when its lease runs out."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import websockets

from memory.db import Database
from memory.usage import UsageStore
from tests.support.fake_llm import FakeLLM
from tests.support.gateway import metric, running_gateway
from tests.support.gateway_proc import GatewayProcess, base_env, vg_command
from tests.support.phone import TwilioCall
from tests.support.servers import ServerThread
from tests.support.voice_client import VoiceClient

MEDIA_PATH = "/v1/telephony/twilio/media"


def sqlite(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}"


def create_user(database_url: str, name: str, *limits: str) -> tuple[str, str]:
    """`voice-gateway users create NAME [--rps N ...]`: (user_id, api_key)."""
    out = subprocess.run(
        vg_command("users", "create", name, *limits),
        env=base_env(VG_DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    return data["user_id"], data["api_key"]


@contextmanager
def voice_gateway(
    database_url: str, llm: tuple[FakeLLM, ServerThread], **overrides: Any
) -> Iterator[ServerThread]:
    """A voice gateway with the loopback fake LLM; OpenAI STT (never called: no audio is
    sent here) so that no whisper model is loaded."""
    with running_gateway(
        database_url,
        voice=True,
        stt="openai",
        openai_base_url=f"{llm[1].url}/v1",
        openai_api_key="test",
        **overrides,
    ) as srv:
        yield srv


def new_agent(url: str, key: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{url}/v1/agents/", json={"model": "openai/fake"}, headers=headers)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def voice_url(srv: ServerThread | GatewayProcess, agent_id: str) -> str:
    return f"{srv.ws_url}/v1/agents/{agent_id}/voice"


async def start_call(url: str, key: str | None = None) -> VoiceClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    c = await VoiceClient(url, headers=headers).connect()
    await c.start()
    return c


async def call_starts(url: str, key: str | None = None) -> bool:
    c = await start_call(url, key)
    await c.close()
    return True


async def refused(url: str, key: str | None = None) -> tuple[int | None, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    c = await VoiceClient(url, headers=headers).connect()
    try:
        code = await c.wait_closed(timeout=15)
        assert not c.of_type("session.started")
        return code, c.close_reason
    finally:
        await c.close()


async def try_call(url: str, key: str | None = None) -> int | None:
    """Start a call: None when it started, else the code the gateway refused it with.

    A refusal closes the socket at once, so it may reach the client before or while the
    client sends session.start (ConnectionClosed) or while it waits for session.started.
    """
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    c = await VoiceClient(url, headers=headers).connect()
    try:
        try:
            await c.start()
            return None
        except (AssertionError, websockets.ConnectionClosed):
            return await c.wait_closed(timeout=15)
    finally:
        await c.close()


# ---- REST request rate ----


def test_rest_burst_gets_429_then_recovers(tmp_path: Path) -> None:
    db = sqlite(tmp_path)
    _, key = create_user(db, "steady")
    slow_id, slow_key = create_user(db, "slow", "--rps", "0.2")
    out = subprocess.run(  # set later: `users limits USER_ID ...`
        vg_command("users", "limits", slow_id, "--burst", "1"),
        env=base_env(VG_DATABASE_URL=db),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["limits"] == {
        "rps": 0.2,
        "burst": 1,
        "max_calls": None,
        "call_minutes": None,
    }
    with running_gateway(db, rate_limit_rps=1, rate_limit_burst=3) as srv:
        with httpx.Client(base_url=srv.url) as http:
            codes = [http.get("/v1/agents/").status_code for _ in range(10)]
            assert codes[:3] == [200, 200, 200], codes
            assert 429 in codes, codes
            r = http.get("/v1/agents/")
            assert r.status_code == 429
            retry = int(r.headers["retry-after"])
            assert 1 <= retry <= 2 and "rate limit exceeded" in r.json()["detail"]
            # other identities and the probes are not affected
            assert http.get("/v1/agents/", headers={"Authorization": f"Bearer {key}"}).is_success
            assert http.get("/health/").status_code == 200
            assert http.get("/ready").status_code == 200
            assert metric(srv.url, "vg_rate_limited_total", kind="rest") >= 2
            time.sleep(retry)
            assert http.get("/v1/agents/").status_code == 200  # recovered
            # a user's own override (0.2/s, no burst)
            slow = {"Authorization": f"Bearer {slow_key}"}
            assert http.get("/v1/agents/", headers=slow).status_code == 200
            r = http.get("/v1/agents/", headers=slow)
            assert r.status_code == 429 and int(r.headers["retry-after"]) in (4, 5)


def test_cors_exposes_retry_after(tmp_path: Path) -> None:
    """A browser page on an allowed origin can read the 429 and its Retry-After."""
    with running_gateway(sqlite(tmp_path), rate_limit_rps=1, rate_limit_burst=1) as srv:
        origin = {"Origin": "http://localhost:5173"}
        with httpx.Client(base_url=srv.url, headers=origin) as http:
            http.get("/v1/agents/")
            r = http.get("/v1/agents/")
            assert r.status_code == 429
            assert r.headers["access-control-allow-origin"] == "http://localhost:5173"
            assert "retry-after" in r.headers["access-control-expose-headers"].lower()


# ---- concurrent calls and call minutes (one process) ----


async def _calls_over_the_limit(srv: ServerThread, key: str) -> None:
    agent_id = new_agent(srv.url, key)
    first = await start_call(voice_url(srv, agent_id), key)
    code, reason = await refused(voice_url(srv, agent_id), key)
    assert code == 4429 and "concurrent calls" in reason
    # the first call carries on
    await first.send({"type": "input_text", "text": "still there?"})
    assert (await first.wait_for("response.done"))["stop_reason"] == "end_turn"
    assert first.close_code is None
    await first.close()
    for _ in range(50):  # the slot is freed as the first call's handler returns
        code = await try_call(voice_url(srv, agent_id), key)
        if code is None:
            break
        assert code == 4429
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the slot of the finished call was never freed")


async def _phone_calls_over_the_limit(srv: ServerThread, agent_id: str) -> None:
    url = srv.ws_url + MEDIA_PATH
    first = await TwilioCall(url, "CA-first", {"agent_id": agent_id}).connect()
    await first.begin(line=False)
    for _ in range(100):
        if metric(srv.url, "vg_active_calls", source="phone") >= 1:
            break
        await asyncio.sleep(0.05)
    second = await TwilioCall(url, "CA-second", {"agent_id": agent_id}).connect()
    await second.begin(line=False)
    for _ in range(100):
        if second.close_code is not None:
            break
        await asyncio.sleep(0.05)
    assert second.close_code == 4429 and first.close_code is None
    await first.stop()  # the caller hangs up; the gateway closes the stream
    for _ in range(200):
        if first.close_code is not None:
            break
        await asyncio.sleep(0.05)
    assert first.close_code == 1000


def test_concurrent_calls_over_the_limit(
    tmp_path: Path, fake_llm_server: tuple[FakeLLM, ServerThread], fake_llm: FakeLLM
) -> None:
    db = sqlite(tmp_path)
    owner_id, one_call = create_user(db, "one-call", "--max-calls", "1")
    with voice_gateway(db, fake_llm_server) as srv:  # default: 1000 calls per identity
        asyncio.run(_calls_over_the_limit(srv, one_call))
        # phone calls count against the agent's owner: the user's agent, the user's slot
        agent_id = new_agent(srv.url, one_call)
        asyncio.run(_phone_calls_over_the_limit(srv, agent_id))
        assert metric(srv.url, "vg_rate_limited_total", kind="calls") >= 2
        assert owner_id


async def _minutes_run_out(srv: ServerThread, key: str) -> float:
    agent_id = new_agent(srv.url, key)
    t0 = time.monotonic()
    c = await start_call(voice_url(srv, agent_id), key)
    err = await c.wait_for("error", timeout=60)
    assert err["code"] == "quota_exceeded" and err["fatal"] is True
    assert await c.wait_closed(timeout=15) == 4429
    elapsed = time.monotonic() - t0
    code, reason = await refused(voice_url(srv, agent_id), key)  # none left today
    assert code == 4429 and "minutes" in reason
    return elapsed


def test_call_minutes_run_out_mid_call_and_stay_used(
    db_url: str, fake_llm_server: tuple[FakeLLM, ServerThread], fake_llm: FakeLLM
) -> None:
    db = db_url  # SQLite, and PostgreSQL when configured: the upsert differs per dialect
    user_id, key = create_user(db, "tiny", "--call-minutes", "0.05")  # 3 seconds a day
    _, other = create_user(db, "other")
    with voice_gateway(db, fake_llm_server, quota_flush_s=1.0) as srv:
        elapsed = asyncio.run(_minutes_run_out(srv, key))
        assert elapsed >= 2.9  # not before the 3 s were used
        assert metric(srv.url, "vg_rate_limited_total", kind="minutes") >= 2
        # another user still calls
        agent_id = new_agent(srv.url, other)
        assert asyncio.run(call_starts(voice_url(srv, agent_id), other))
    assert asyncio.run(call_seconds(db, f"user:{user_id}")) >= 3.0
    # a restart forgets nothing: the day's minutes live in the database
    with voice_gateway(db, fake_llm_server) as srv:
        agent_id = new_agent(srv.url, key)
        code, _ = asyncio.run(refused(voice_url(srv, agent_id), key))
        assert code == 4429


async def call_seconds(database_url: str, identity: str) -> float:
    db = Database(database_url)
    try:
        return await UsageStore(db).call_seconds(identity)
    finally:
        await db.close()


# ---- shared through Redis ----


def test_two_gateways_share_the_request_budget(tmp_path: Path, redis_url: str) -> None:
    db = sqlite(tmp_path)
    settings = {"redis_url": redis_url, "rate_limit_rps": 1, "rate_limit_burst": 4}
    with running_gateway(db, **settings) as a, running_gateway(db, **settings) as b:
        t0 = time.monotonic()
        codes = {a.url: [], b.url: []}  # type: dict[str, list[int]]
        for i in range(12):
            url = (a.url, b.url)[i % 2]
            codes[url].append(httpx.get(f"{url}/v1/agents/").status_code)
        elapsed = time.monotonic() - t0
        ok = sum(c == 200 for cs in codes.values() for c in cs)
        # one budget: 4 at once plus 1/s refill (per process it would be 8+)
        assert 4 <= ok <= 4 + int(elapsed) + 1, (codes, elapsed)
        assert 429 in codes[a.url] and 429 in codes[b.url]


async def _slots_shared(a: ServerThread, b: ServerThread, lease_s: float) -> None:
    agent_id = new_agent(a.url)
    first = await start_call(voice_url(a, agent_id))
    await asyncio.sleep(lease_s * 1.5)  # outlive one lease: it must have been refreshed
    code, _ = await refused(voice_url(b, agent_id))
    assert code == 4429
    await first.close()
    for _ in range(50):
        code = await try_call(voice_url(b, agent_id))
        if code is None:
            return
        assert code == 4429
        await asyncio.sleep(0.1)
    raise AssertionError("gateway b never got the slot that a released")


def test_two_gateways_share_call_slots(
    tmp_path: Path, redis_url: str, fake_llm_server: tuple[FakeLLM, ServerThread]
) -> None:
    db = sqlite(tmp_path)
    settings = {"redis_url": redis_url, "max_concurrent_calls": 1, "call_lease_s": 2.0}
    with (
        voice_gateway(db, fake_llm_server, **settings) as a,
        voice_gateway(db, fake_llm_server, **settings) as b,
    ):
        asyncio.run(_slots_shared(a, b, 2.0))


async def _slot_freed_after_kill(dead: GatewayProcess, live: ServerThread, lease_s: float) -> float:
    agent_id = new_agent(dead.url)
    call = await start_call(voice_url(dead, agent_id))
    dead.signal(signal.SIGKILL)
    dead.wait(30)
    killed_at = time.monotonic()
    await call.wait_closed(timeout=15)
    code, _ = await refused(voice_url(live, agent_id))
    assert code == 4429  # the dead gateway's lease still holds the slot ...
    while time.monotonic() - killed_at < lease_s + 10:
        await asyncio.sleep(0.25)
        code = await try_call(voice_url(live, agent_id))
        if code is None:
            return time.monotonic() - killed_at  # ... until it runs out
        assert code == 4429
    raise AssertionError("the killed gateway's call slot was never freed")


def test_killed_gateway_frees_its_slot_by_lease_expiry(
    tmp_path: Path, redis_url: str, fake_llm_server: tuple[FakeLLM, ServerThread]
) -> None:
    db = sqlite(tmp_path)
    lease_s = 3.0
    env = base_env(
        VG_DATABASE_URL=db,
        VG_REDIS_URL=redis_url,
        VG_STT="openai",
        OPENAI_BASE_URL=f"{fake_llm_server[1].url}/v1",
        OPENAI_API_KEY="test",
        VG_MAX_CONCURRENT_CALLS="1",
        VG_CALL_LEASE_S=str(lease_s),
    )
    dead = GatewayProcess(env, tmp_path / "dead.log").start()
    try:
        settings = {"redis_url": redis_url, "max_concurrent_calls": 1, "call_lease_s": lease_s}
        with voice_gateway(db, fake_llm_server, **settings) as live:
            waited = asyncio.run(_slot_freed_after_kill(dead, live, lease_s))
            assert waited <= lease_s + 10
    finally:
        dead.stop()
