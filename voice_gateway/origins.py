"""Browser Origin checks (VG_ALLOWED_ORIGINS) for the sockets and the REST API.

A request without an Origin header (servers, SDKs, phones) is not a browser's and passes. A
browser's Origin must match the allowed list (`*` allows any; `http://127.0.0.1:*` style
patterns allowed), or be the gateway's own origin: the page the gateway itself serves. "Own"
means the Origin's host is the Host the request was sent to and, in open mode (no
VG_API_KEY), that host is a loopback name: a DNS-rebinding page (evil.example resolving to
127.0.0.1) then cannot pass as the gateway's own page. Refused: WebSocket -> accepted, then
closed 4403 (so the client sees the code); HTTP -> 403 JSON detail. Allowed cross-origin
requests get CORS headers (Starlette's CORSMiddleware, built by `cors_options`).
"""

from __future__ import annotations

import fnmatch
import logging
import re
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from voice_gateway.limits import send_json
from voice_gateway.pipeline.transport import CLOSE_FORBIDDEN
from voice_gateway.settings import Settings

log = logging.getLogger(__name__)
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "[::1]", "::1"}
LOOPBACK_ORIGINS = [
    f"{scheme}://{host}{port}"
    for scheme in ("http", "https")
    for host in ("127.0.0.1", "localhost", "[::1]")
    for port in ("", ":*")
]


class OriginPolicy:
    def __init__(self, settings: Settings) -> None:
        raw = settings.allowed_origins
        listed = [o.strip().lower().rstrip("/") for o in (raw or "").split(",") if o.strip()]
        self.patterns = listed if raw is not None else list(LOOPBACK_ORIGINS)
        self.any = "*" in self.patterns
        self.keyed = bool(settings.api_key)
        public = urlsplit(settings.public_url or "")
        self.public = f"{public.scheme}://{public.netloc}".lower() if public.netloc else None

    def allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if self.any or origin == self.public:
            return True
        if any(fnmatch.fnmatchcase(origin, p) for p in self.patterns):
            return True
        netloc = urlsplit(origin).netloc
        if not host or netloc != host.lower() or urlsplit(origin).scheme not in ("http", "https"):
            return False
        hostname = netloc.rsplit(":", 1)[0] if not netloc.endswith("]") else netloc
        return self.keyed or hostname in LOOPBACK_NAMES

    def cors_options(self) -> dict[str, Any]:
        """CORSMiddleware options: headers for the allowed cross-origin callers."""
        common: dict[str, Any] = {
            "allow_methods": ["*"],
            "allow_headers": ["*"],
            "expose_headers": ["Retry-After"],
            "max_age": 600,
        }
        if self.any:
            return {"allow_origins": ["*"], **common}
        regexes = [fnmatch.translate(p) for p in self.patterns]
        if self.public:
            regexes.append(re.escape(self.public))
        return {"allow_origin_regex": "|".join(f"(?:{r})" for r in regexes) or "(?!)", **common}


class OriginGuard:
    """ASGI middleware: refuse browsers from other origins before anything else runs."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or self.policy.allowed(origin, headers.get("host")):
            await self.app(scope, receive, send)
            return
        client = scope.get("client") or ("-", 0)
        log.warning(
            "refused %s %s from origin %r (client %s): not in VG_ALLOWED_ORIGINS",
            "WebSocket" if scope["type"] == "websocket" else scope.get("method", "?"),
            scope.get("path", ""),
            origin[:200],
            client[0],
        )
        if scope["type"] == "websocket":
            message = await receive()
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                await send(
                    {
                        "type": "websocket.close",
                        "code": CLOSE_FORBIDDEN,
                        "reason": "origin not allowed",
                    }
                )
            return
        await send_json(send, 403, {"detail": f"origin not allowed: {origin[:200]}"})
