"""`voice-gateway serve` as a real process: the `call` CLI plays a WAV file to it, /metrics
and /ready report, and SIGTERM drains calls (error server_shutdown, turn finished, 1012)."""

from __future__ import annotations

import json
import signal
import subprocess
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.gateway_proc import ROOT, GatewayProcess, base_env, vg_command
from tests.support.speech import rms_dbfs, silence, speak, wer, write_wav
from tests.support.voice_client import VoiceClient

UTTERANCE = "My name is Grace and I live in Paris."


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tmp = tmp_path_factory.mktemp("gwproc")
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'vg.db'}",
        VG_DRAIN_TIMEOUT_S="20",
        VG_LOG_FORMAT="json",
        VG_WEBRTC_HOST_ADDRESSES="127.0.0.1",  # `call --webrtc`: media on loopback only
    )
    gw = GatewayProcess(env, tmp / "gateway.log").start()
    try:
        yield gw
    finally:
        gw.stop()


def create_agent(gw: GatewayProcess, name: str) -> str:
    resp = httpx.post(
        f"{gw.url}/v1/agents/",
        json={"name": name, "memory_blocks": [{"label": "human", "value": ""}]},
        timeout=30,
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


@pytest.mark.parametrize("transport", [[], ["--webrtc"]], ids=["socket", "webrtc"])
def test_call_cli_plays_a_wav_and_saves_the_reply(
    gateway: GatewayProcess, tmp_path: Path, transport: list[str]
) -> None:
    create_agent(gateway, "grace-line")
    wav = tmp_path / "caller.wav"
    write_wav(str(wav), np.concatenate([silence(300, 22050), speak(UTTERANCE, 22050)]), 22050)
    out = tmp_path / "reply.wav"
    res = subprocess.run(
        vg_command(
            "call", "grace-line", str(wav), "--url", gateway.url, "--out", str(out), *transport
        ),
        cwd=ROOT,
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert wer(UTTERANCE, report["transcript"]) <= 0.2, report
    assert "remember" in report["reply"].lower()  # the demo model acknowledges the facts
    assert report["metrics"]["voice_to_voice_ms"] > 0
    assert "playing" in res.stderr and "agent said:" in res.stderr  # progress output
    with wave.open(str(out)) as w:
        assert w.getframerate() == 16000
        audio = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(audio) > 16000 and rms_dbfs(audio) > -35


def test_call_cli_bad_input(gateway: GatewayProcess, tmp_path: Path) -> None:
    missing = subprocess.run(
        vg_command("call", "nobody", str(tmp_path / "x.wav"), "--url", gateway.url),
        cwd=ROOT,
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0
    wav = tmp_path / "x.wav"
    write_wav(str(wav), silence(200, 16000), 16000)
    unknown = subprocess.run(
        vg_command("call", "no-such-agent", str(wav), "--url", gateway.url),
        cwd=ROOT,
        env=gateway.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode != 0 and "no agent" in unknown.stderr


async def test_metrics_and_readiness(gateway: GatewayProcess) -> None:
    http = httpx.AsyncClient(base_url=gateway.url, timeout=30)
    assert (await http.get("/health/")).json()["status"] == "ok"
    ready = (await http.get("/ready")).json()
    assert ready["status"] == "ready" and ready["checks"]["models"] is True

    def counter(text: str, prefix: str) -> float:
        rows = [line for line in text.splitlines() if line.startswith(prefix)]
        return float(rows[0].split()[-1]) if rows else 0.0

    before = (await http.get("/metrics")).text
    agent_id = create_agent(gateway, "metered")
    c = await VoiceClient(f"{gateway.ws_url}/v1/agents/{agent_id}/voice").connect()
    session_id = (await c.start())["session_id"]
    during = (await http.get("/metrics")).text
    assert counter(during, 'vg_active_calls{source="voice"}') >= 1
    await c.send({"type": "input_text", "text": "Hello!"})
    await c.wait_for("turn.metrics", timeout=30)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    await http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": "a typed turn"}]},
    )
    after = (await http.get("/metrics")).text
    for name in ("vg_voice_to_voice_seconds_bucket", "vg_stage_seconds_bucket", "vg_outbox_depth"):
        assert name in after, name
    for prefix in (
        'vg_calls_total{source="voice"}',
        'vg_turns_total{source="voice"}',
        'vg_turns_total{source="text"}',
        'vg_voice_to_voice_seconds_count{source="voice"}',
    ):
        assert counter(after, prefix) == counter(before, prefix) + 1, prefix
    await http.aclose()
    # VG_LOG_FORMAT=json: every line is a JSON object; the call's lines carry its id
    lines = gateway.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    mine = [r for r in records if r["call_id"] == session_id]
    assert any(r["msg"].startswith("call ended") for r in mine), records[-5:]


async def test_sigterm_lets_the_turn_finish_then_closes_1012(gateway: GatewayProcess) -> None:
    agent_id = create_agent(gateway, "drain-me")
    c = await VoiceClient(f"{gateway.ws_url}/v1/agents/{agent_id}/voice").connect()
    await c.start()
    await c.send({"type": "input_text", "text": "Hello there, how are you today?"})
    await c.wait_for("response.audio.started", timeout=30)
    gateway.signal(signal.SIGTERM)
    err = await c.wait_for("error", timeout=10)
    assert err["code"] == "server_shutdown" and err["fatal"] is True
    done = await c.wait_for("response.done", timeout=30)  # the turn still finishes
    assert done["stop_reason"] == "end_turn"
    assert await c.wait_closed(timeout=30) == 1012
    types = [r.event["type"] for r in c.events]
    assert types.index("error") < types.index("response.done")
    gateway.wait(60)  # the process exits after the drain
    stored = [line for line in gateway.log().splitlines() if "drained" in line]
    assert stored, gateway.log()
