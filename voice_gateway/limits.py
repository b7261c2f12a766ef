"""ASGI middleware: callers without a valid key -> 401; over their request rate -> 429 with
Retry-After (voice_gateway/quotas.py); request bodies over the limit -> 413. Each answers
with a JSON detail."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voice_gateway.auth import anonymous, client_ip
from voice_gateway.errors import ApiError
from voice_gateway.ratelimit import retry_after_header

# Probes and scrapes are never rate limited (load balancers, Prometheus).
NOT_LIMITED = frozenset({"/health", "/health/", "/ready", "/metrics", "/v1/health", "/v1/health/"})
# WebRTC signalling authenticates in its route, as the voice socket does: a browser's offer
# carries a session token (query or bearer), a hang-up the call's unguessable resource URL
WEBRTC_PATH = re.compile(r"/v1/agents/[^/]+/webrtc(/[^/]+)?")


async def send_json(
    send: Send, status: int, data: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    body = json.dumps(data).encode()
    start: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


TWILIO_SIGNED = ("/v1/telephony/twilio/voice", "/v1/telephony/twilio/status")


def needs_key(path: str) -> bool:
    """The API under /v1 needs a key (when VG_API_KEY is set) before any route code runs, so
    a route that forgot its own auth call is still closed. Public: probes (`/v1/health/`
    included, as in Letta; they never reach this check, see NOT_LIMITED), the API
    description, the static web client, the Twilio webhook and status callback
    (X-Twilio-Signature) and WebRTC signalling (routes/webrtc.py)."""
    if WEBRTC_PATH.fullmatch(path):
        return False
    return path.startswith("/v1/") and path not in TWILIO_SIGNED


async def refuse_unauthenticated(send: Send, path: str, exc: ApiError) -> None:
    if path.startswith("/v1/chat/"):  # the OpenAI-compatible endpoint keeps OpenAI's shape
        error = {"message": exc.detail, "type": "invalid_request_error", "param": None}
        await send_json(send, exc.status, {"error": {**error, "code": "invalid_api_key"}})
    else:
        await send_json(send, exc.status, {"detail": exc.detail})


class Admission:
    """Who may come in, and how often: the caller's key is checked first (401 on /v1 without
    a valid key), then its request rate per identity (user key, admin key, or anonymous
    client IP; GCRA in voice_gateway/ratelimit.py) -> 429 with Retry-After. A caller whose
    key is refused is limited by its IP, so guessing keys is rate limited too. WebSockets
    authenticate in their routes (the browser's token comes in the query string)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gw = getattr(scope["app"].state, "gw", None) if "app" in scope else None
        if scope["type"] != "http" or scope["path"] in NOT_LIMITED or gw is None:
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        refused: ApiError | None = None
        try:
            identity = (await gw.auth.principal(conn)).identity
        except ApiError as exc:
            refused, identity = exc, anonymous(client_ip(conn)).identity
        wait, limits = await gw.quotas.check_request(identity)
        if wait > 0:
            retry = retry_after_header(wait)
            detail = (
                f"rate limit exceeded: at most {limits.rps:g} requests/s with bursts of "
                f"{limits.burst}; retry in {retry} s"
            )
            await send_json(send, 429, {"detail": detail}, ((b"retry-after", retry.encode()),))
        elif refused is not None and needs_key(scope["path"]):
            await refuse_unauthenticated(send, scope["path"], refused)
        else:
            await self.app(scope, receive, send)


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """413 over `max_bytes`; a file upload (a path ending in /upload, or an agent file import)
    may carry `upload_bytes` plus the multipart envelope (the route checks the file's size)."""

    def __init__(self, app: ASGIApp, max_bytes: int, upload_bytes: int = 0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.upload_bytes = upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", "")).rstrip("/")
        if self.upload_bytes and (path.endswith("/upload") or path == "/v1/agents/import"):
            limit = max(self.max_bytes, self.upload_bytes + 65_536)
            await BodyLimit(self.app, limit)(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._reject(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send: Send) -> None:
        await send_json(send, 413, {"detail": f"request body over {self.max_bytes} bytes"})


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ControlCharPath:
    """404 for a path with a control character in it (`/v1/folders/%0A`): Starlette's route
    patterns end in `$`, which also matches before a final newline, so such a path would reach
    the list route instead of the item route (schemathesis found it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _CONTROL.search(str(scope.get("path", ""))):
            await send_json(
                send, 404, {"detail": "no such route: the path has a control character"}
            )
            return
        await self.app(scope, receive, send)
