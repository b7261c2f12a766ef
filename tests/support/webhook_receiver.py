"""A loopback webhook receiver for tests: a Starlette app that verifies each POST's
`X-VG-Signature` the way docs/call_reports.md tells receivers to, records it, and answers
with the next scripted status (200 when the script is empty; "hang": never answers). And a
socket that accepts connections and never answers at all."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOLERANCE_S = 300


def verify(secret: str, body: bytes, header: str, now: float | None = None) -> bool:
    """The receiver's check, as docs/call_reports.md gives it."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, sent = parts.get("t", ""), parts.get("v1", "")
    if not t.isdigit() or abs((now or time.time()) - int(t)) > TOLERANCE_S:
        return False
    mac = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, sent)


@dataclass
class Delivery:
    event_id: str
    body: bytes
    signature: str
    verified: bool
    answered: int | None

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class Receiver:
    secret: str
    script: list[int | str] = field(default_factory=list)
    hang_s: float = 3600.0  # how long a "hang" holds the request
    got: list[Delivery] = field(default_factory=list)

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        signature = request.headers.get("x-vg-signature", "")
        answer = self.script.pop(0) if self.script else 200
        status = answer if isinstance(answer, int) else None
        self.got.append(
            Delivery(
                request.headers.get("x-vg-event-id", ""),
                body,
                signature,
                verify(self.secret, body, signature),
                status,
            )
        )
        if status is None:  # "hang"
            await asyncio.sleep(self.hang_s)
        return JSONResponse({"ok": status == 200}, status or 200)

    def delivered(self) -> list[Delivery]:
        return [d for d in self.got if d.answered == 200]


class SilentSocket:
    """Accepts TCP connections on loopback and never reads or answers (a receiver that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.sock.close()
        for conn in self.accepted:
            conn.close()
