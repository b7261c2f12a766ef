"""Run ASGI apps on real loopback sockets for tests: a uvicorn server in its own thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerThread:
    """uvicorn serving `app` on 127.0.0.1:<port> from a daemon thread with its own event loop."""

    def __init__(self, app: Any, port: int | None = None, **config: Any) -> None:
        self.app = app
        self.port = port or free_port()
        config.setdefault("log_level", "warning")
        config.setdefault("ws_per_message_deflate", False)
        config.setdefault("lifespan", "on")
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, **config)
        )
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve())
        self.loop.close()

    def start(self, timeout: float = 60.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("test server thread exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError("test server did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the server's loop (e.g. to read app state) and return its result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextmanager
def serve(app: Any, **config: Any) -> Iterator[ServerThread]:
    srv = ServerThread(app, **config).start()
    try:
        yield srv
    finally:
        srv.stop()
