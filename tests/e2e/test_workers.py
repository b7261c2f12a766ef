"""`voice-gateway serve --workers N`: without VG_REDIS_URL it refuses to start (turn locks and
the transcript bus must be Redis's); with Redis, two worker processes share one port (both
answer), serve the API, and stop together on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx

from tests.support.gateway_proc import ROOT, GatewayProcess, base_env, vg_command


def test_workers_refuse_to_start_without_redis(tmp_path: Path) -> None:
    env = base_env(VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}", VG_VOICE="0")
    for args, extra in ((["--workers", "2"], {}), ([], {"VG_WORKERS": "3"})):
        res = subprocess.run(
            vg_command("serve", "--port", "1", *args),
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode != 0
        assert "needs VG_REDIS_URL" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(entry))
    return out


def test_two_workers_share_the_port(tmp_path: Path, redis_url: str) -> None:
    env = base_env(
        VG_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'vg.db'}",
        VG_VOICE="0",
        VG_REDIS_URL=redis_url,
        VG_WORKERS="2",
    )
    gw = GatewayProcess(env, tmp_path / "gateway.log").start()
    try:
        assert gw.proc is not None
        workers = _children(gw.proc.pid)
        assert len(workers) == 2, gw.log()
        pids = set()
        for _ in range(60):  # a new connection each time: the kernel picks a worker by hash
            with httpx.Client(timeout=10) as c:
                pids.add(c.get(f"{gw.url}/health").json()["pid"])
            if pids == workers:
                break
        assert pids == workers, (pids, workers)
        made = httpx.post(f"{gw.url}/v1/agents/", json={"name": "w"}, timeout=30)
        assert made.status_code == 201, made.text
        for _ in range(4):  # whichever worker answers knows the agent (one database)
            listed = httpx.get(f"{gw.url}/v1/agents/", timeout=30).json()
            assert [a["name"] for a in listed] == ["w"]
        gw.signal(signal.SIGTERM)
        assert gw.wait(60) == 0, gw.log()
        assert not any(Path(f"/proc/{p}").exists() for p in workers)
    finally:
        gw.stop()
