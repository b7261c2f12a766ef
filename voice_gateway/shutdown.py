"""Graceful shutdown: on SIGTERM stop taking calls (/ready 503, new sockets closed 1012). Browser
calls: the current turn finishes (up to the deadline), then `error` server_shutdown and close
1012 (the client reconnects elsewhere). Phone calls cannot reconnect: they go on until they end
or the deadline (VG_DRAIN_TIMEOUT_S) comes near, then hear a goodbye and are closed
(pipeline/phone_drain.py). Then the outbox is flushed and uvicorn closes the rest. A second
signal forces the exit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn
from starlette.applications import Starlette

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)


async def drain(gw: Gateway, grace_s: float) -> None:
    gw.draining = True  # /ready says 503; new calls are refused with 1012
    deadline = time.monotonic() + grace_s
    sessions = list(gw.calls)
    phones = sum(1 for s in sessions if s.transport.source == "phone")
    log.info("draining: %d call(s) (%d by phone), up to %.0f s", len(sessions), phones, grace_s)
    await asyncio.gather(*(s.drain(deadline) for s in sessions), return_exceptions=True)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(gw.bus.publisher.drain_once(), max(1.0, deadline - time.monotonic()))
    log.info("drained")


class GracefulServer(uvicorn.Server):
    """uvicorn with a drain step before its own shutdown."""

    def __init__(self, config: uvicorn.Config, app: Starlette, grace_s: float) -> None:
        super().__init__(config)
        self.app = app
        self.grace_s = grace_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        gw: Gateway | None = getattr(self.app.state, "gw", None)
        if self._draining is not None or gw is None or self._loop is None:
            if self._draining is not None:
                self.force_exit = True
            super().handle_exit(sig, frame)
            return
        self._captured_signals.append(sig)
        log.info("%s: draining before shutdown", signal.Signals(sig).name)
        self._loop.call_soon_threadsafe(self._start_drain, gw)

    def _start_drain(self, gw: Gateway) -> None:
        async def run() -> None:
            try:
                await drain(gw, self.grace_s)
            finally:
                self.should_exit = True

        self._draining = asyncio.ensure_future(run())
