"""A real `voice-gateway serve` subprocess on a free loopback port (for shutdown, CLI and
scale-out tests that need separate processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


def vg_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "voice_gateway.cli", *args]


def base_env(**values: str) -> dict[str, str]:
    """The environment of a child process: ours without VG_/LLM settings, plus `values`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("VG_") and k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    # a loaded test machine must not make a test gateway refuse calls (test_admission.py)
    env.update(
        HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", VG_LOG_LEVEL="INFO", VG_ADMIT_MAX_LAG_MS="0"
    )
    env.setdefault("VG_TURN_DETECTION", "vad")  # espeak-ng speech (tests/support/gateway.py)
    env.update(values)
    return env


@dataclass
class GatewayProcess:
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    wrap: list[str] = field(default_factory=list)  # a launcher before the command

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> GatewayProcess:
        env = {**self.env, "VG_PORT": str(self.port), "VG_HOST": "127.0.0.1"}
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.wrap, *vg_command("serve")],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateway not ready: {self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if hasattr(self, "_log"):
            self._log.close()
