"""Operations endpoints: `/metrics` (Prometheus), `/health/` (liveness), `/ready` (readiness)."""

from __future__ import annotations

import os

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from voice_gateway import __version__
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.metrics import CONTENT_TYPE_LATEST


async def metrics(request: Request) -> Response:
    """Prometheus exposition. With VG_API_KEY set it needs that (admin) key as a bearer token;
    health and readiness stay open for load balancers and container probes."""
    gw = gateway_of(request)
    principal = await gw.auth.principal(request)
    if principal.scoped:
        raise ApiError(403, "metrics need the admin key")
    return Response(await gw.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def health(request: Request) -> JSONResponse:
    """The process is up and serving HTTP (`pid`: which worker of `serve --workers N`)."""
    return JSONResponse({"status": "ok", "version": __version__, "pid": os.getpid()})


async def ready(request: Request) -> JSONResponse:
    """Ready for traffic: database reachable, speech models loaded, not draining. Redis is
    reported but does not decide: without it calls and requests go on (turns are spooled)."""
    gw = gateway_of(request)
    checks: dict[str, bool] = {"database": await gw.memory.db.ping()}
    if gw.settings.redis_url:
        checks["redis"] = await gw.bus.redis_ok()
    if gw.settings.voice:
        checks["models"] = gw.voice is not None
    checks["accepting"] = not gw.draining
    ok = all(v for k, v in checks.items() if k != "redis")
    return JSONResponse(
        {"status": "ready" if ok else "unavailable", "checks": checks},
        status_code=200 if ok else 503,
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/metrics", metrics, methods=["GET"], include_in_schema=False),
        Route("/health", health, methods=["GET"], include_in_schema=False),
        Route("/health/", health, methods=["GET"], include_in_schema=False),
        Route("/ready", ready, methods=["GET"], include_in_schema=False),
    ]
