"""HTTP error mapping: every failure is a JSON {"detail": ...} with the right status."""

from __future__ import annotations

import json
import logging

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Mount, Route

from agents.locks import LockTimeout
from memory.models import Conflict, LimitExceeded, NotFound

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


def validation_detail(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "body"
        parts.append(f"{where}: {err.get('msg')}")
    return "; ".join(parts)


def allowed_methods(request: Request) -> str:
    """The `Allow` header of a 405: the methods of every route on the request's path (one path
    is served by several Route objects, one per method; Starlette names only the first's). A
    static mount (the web client) serves GET and HEAD."""
    allowed: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if isinstance(route, Route) and match is not Match.NONE:
            allowed |= route.methods or set()
        elif isinstance(route, Mount) and match is not Match.NONE and not allowed:
            allowed |= {"GET", "HEAD"}
    return ", ".join(sorted(allowed))


async def handle(request: Request, exc: Exception) -> Response:
    status, detail = 500, "internal server error"
    if isinstance(exc, ApiError):
        status, detail = exc.status, exc.detail
    elif isinstance(exc, HTTPException):
        status, detail = exc.status_code, str(exc.detail)
    elif isinstance(exc, NotFound):
        status, detail = 404, str(exc)
    elif isinstance(exc, Conflict):
        status, detail = 409, str(exc)
    elif isinstance(exc, LockTimeout):
        status, detail = 409, f"the agent is busy with another turn: {exc}"
    elif isinstance(exc, LimitExceeded):
        status, detail = 422, str(exc)
    elif isinstance(exc, ValidationError):
        status, detail = 422, validation_detail(exc)
    elif isinstance(exc, json.JSONDecodeError):
        status, detail = 400, f"malformed JSON body: {exc.msg} at position {exc.pos}"
    else:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
    headers = {"Allow": allowed_methods(request)} if status == 405 else None
    if isinstance(exc, ApiError) and exc.headers:
        headers = {**(headers or {}), **exc.headers}
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


EXCEPTION_HANDLERS = {
    Exception: handle,
    HTTPException: handle,
    ApiError: handle,
    NotFound: handle,
    Conflict: handle,
    LockTimeout: handle,
    LimitExceeded: handle,
    ValidationError: handle,
    json.JSONDecodeError: handle,
}
