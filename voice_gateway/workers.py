"""`voice-gateway serve --workers N`: N gateway processes on one port, one per core.

One process runs its calls on one event loop, so it uses one core. With N workers each is a
whole `voice-gateway serve` (its own app, models, database pools) binding the same address
with SO_REUSEPORT: the kernel spreads new connections over the N listening sockets, so no
process hands sockets to another and none is a bottleneck. This process only supervises:
it starts the workers in their own sessions, forwards SIGTERM/SIGINT to them once (each then
drains its calls as `voice-gateway serve` does), restarts a worker that dies on its own, and
exits when all have stopped.

Several processes share no memory, so what must be shared goes through Redis: the turn locks
(a conversation's turns must not interleave across workers) and the transcript bus (the
in-process bus would run sleeptime in every worker). Hence N > 1 refuses to start without
VG_REDIS_URL (`check_workers`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from voice_gateway.settings import Settings

log = logging.getLogger(__name__)
RESTART_PAUSE_S = 1.0
STARTUP_S = 30.0  # a worker that exits sooner failed to start: stop, do not loop


class WorkersRefused(Exception):
    """The settings do not allow several workers (the message says why and what to do)."""


def check_workers(settings: Settings) -> None:
    if settings.workers > 1 and not settings.redis_url:
        raise WorkersRefused(
            f"--workers {settings.workers} needs VG_REDIS_URL: several worker processes share "
            "their conversations' turn locks and the transcript bus through Redis (without it "
            "each worker would lock turns and run sleeptime on its own). Set VG_REDIS_URL, or "
            "run one worker."
        )


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port that other processes may bind too (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Starts `n` workers (`voice-gateway serve --reuse-port`), keeps them running, stops them."""

    def __init__(self, n: int, host: str, port: int) -> None:
        self.n, self.host, self.port = n, host, port
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        self.started = [0.0] * n
        self.stopping = False
        self.failed = False  # a worker failed to start: the others are stopped, exit 1

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "voice_gateway.cli", "serve", "--reuse-port"]
        cmd += ["--host", self.host, "--port", str(self.port)]
        proc = subprocess.Popen(cmd, env={**os.environ, "VG_WORKERS": "1"}, start_new_session=True)
        self.started[index] = time.monotonic()
        log.info("worker %d/%d started (pid %d)", index + 1, self.n, proc.pid)
        return proc

    def _forward(self, sig: int, frame: FrameType | None) -> None:
        self.stopping = True
        log.info("%s: stopping %d workers", signal.Signals(sig).name, self.n)
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(sig)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        self.procs = [self._spawn(i) for i in range(self.n)]
        while True:
            alive = 0
            for i, proc in enumerate(self.procs):
                if proc is None or proc.poll() is None:
                    alive += 1
                    continue
                if not self.stopping and time.monotonic() - self.started[i] < STARTUP_S:
                    log.error("worker %d failed to start (exit %s)", i + 1, proc.returncode)
                    self.failed = True
                    self._forward(signal.SIGTERM, None)
                elif not self.stopping:
                    log.error("worker %d exited with %s: restarting it", i + 1, proc.returncode)
                    time.sleep(RESTART_PAUSE_S)
                    self.procs[i] = self._spawn(i)
                    alive += 1
            if not alive:
                break
            time.sleep(0.2)
        codes = [p.returncode for p in self.procs if p is not None]
        log.info("all workers stopped (exit codes %s)", codes)
        # uvicorn re-raises the signal it drained on: a worker stopped by ours ends with -sig
        clean = {0, -signal.SIGTERM, -signal.SIGINT} if self.stopping else {0}
        return 0 if not self.failed and all(c in clean for c in codes) else 1
