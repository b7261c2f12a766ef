"""Real `voice-gateway sleeptime` worker subprocesses for tests (and benchmarks): start one
against a database and a Redis, wait for it to consume, read its log, SIGTERM or SIGKILL it."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.support.gateway_proc import ROOT, base_env, vg_command

READY = ": ready"  # printed (whatever the log level) once the worker reads the stream


@dataclass
class WorkerProcess:
    """One worker. `env` adds settings, e.g. {"VG_CLAIM_IDLE_MS": "1500"}."""

    database_url: str
    redis_url: str
    log_path: Path
    consumer: str | None = None
    concurrency: int = 2
    env: dict[str, str] = field(default_factory=dict)
    nice: int = 0  # run below the gateway's priority (a worker on the gateway's machine)
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self, timeout: float = 90.0) -> WorkerProcess:
        env = base_env(VG_DATABASE_URL=self.database_url, VG_REDIS_URL=self.redis_url, **self.env)
        cmd = vg_command("sleeptime", "--concurrency", str(self.concurrency))
        if self.consumer:
            cmd += ["--consumer", self.consumer]
        if self.nice:
            cmd = ["nice", "-n", str(self.nice), *cmd]
        self._log = self.log_path.open("ab")
        skip = len(self.log_text())  # a restart appends to the same log
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.wait_for_log(READY, timeout, after=skip)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 60.0, *, after: int = 0) -> str:
        """Wait until `text` appears in the log (past offset `after`); returns the log."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log_text()
            if text in log[after:]:
                return log
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"worker exited ({self.proc.returncode}) before {text!r}:\n{log[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker did not log {text!r} in {timeout}s:\n{log[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, holding its entries."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close_log()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (graceful stop); returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._close_log()
        return code

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@contextmanager
def running_workers(
    database_url: str, redis_url: str, log_dir: Path, n: int = 1, **options: object
) -> Iterator[list[WorkerProcess]]:
    """Start `n` workers (consumers w1..wn, logs in log_dir/worker-wK.log); stop them after."""
    workers: list[WorkerProcess] = []
    try:
        for i in range(1, n + 1):
            w = WorkerProcess(
                database_url,
                redis_url,
                log_dir / f"worker-w{i}.log",
                consumer=f"w{i}",
                **options,  # type: ignore[arg-type]
            )
            workers.append(w)
            w.start()
        yield workers
    finally:
        for w in workers:
            w.stop()
