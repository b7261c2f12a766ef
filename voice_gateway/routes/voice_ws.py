"""`/v1/agents/{agent_id}/voice` (browser voice socket) and voice session tokens."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from memory.identities import BadCallerKey, check_caller_key
from memory.models import NotFound
from voice_gateway.auth import Principal, anonymous, client_ip
from voice_gateway.capacity import Refusal, Ticket
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.pipeline.callers import CallerRule
from voice_gateway.pipeline.session import VoiceSession
from voice_gateway.pipeline.transport import (
    CLOSE_NOT_FOUND,
    CLOSE_QUOTA,
    CLOSE_RESTART,
    CLOSE_TRY_LATER,
    CLOSE_UNAUTHORIZED,
    StartInfo,
    Transport,
)
from voice_gateway.protocol.browser_transport import BrowserTransport
from voice_gateway.quotas import CallGuard, QuotaExceeded
from voice_gateway.ratelimit import retry_after_header

log = logging.getLogger(__name__)


async def create_voice_session(request: Request) -> JSONResponse:
    """Issue a short-lived token for the browser voice socket (browsers cannot set headers).
    Body (optional): {"caller": "<your app's user id>"}, bound into the token."""
    gw = gateway_of(request)
    agent_id = request.path_params["agent_id"]
    await gw.auth.agent(request, agent_id)
    principal = await gw.auth.principal(request)
    caller = await _caller_of(request)
    token, exp = gw.auth.issue_token(agent_id, principal, caller)
    scheme = "wss" if request.url.scheme == "https" else "ws"
    url = f"{scheme}://{request.url.netloc}/v1/agents/{agent_id}/voice?session_token={token}"
    body: dict[str, Any] = {"session_token": token, "expires_at": exp, "url": url}
    if caller is not None:
        body["caller"] = caller
    return JSONResponse(body, status_code=201)


async def _caller_of(request: Request) -> str | None:
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, 'body must be JSON: {"caller": "<user id>"}') from exc
    if not isinstance(body, dict):
        raise ApiError(400, "body must be a JSON object")
    caller = body.get("caller")
    if caller is None:
        return None
    if not isinstance(caller, str):
        raise ApiError(422, "caller must be a string")
    try:
        return check_caller_key(caller)
    except BadCallerKey as exc:
        raise ApiError(400, f"caller: {exc}") from exc


async def _authenticate(ws: WebSocket, agent_id: str) -> Principal:
    gw = gateway_of(ws)
    token = ws.query_params.get("session_token")
    if token:
        return gw.auth.verify_token(token, agent_id)
    return await gw.auth.principal(ws)


async def refusal(gw: Gateway, ws: WebSocket, exc: ApiError) -> tuple[int, str]:
    """The close for a refused credential. A failed attempt counts against the client IP's
    request rate, as on HTTP (voice_gateway/limits.py), so keys and tokens cannot be guessed
    at socket speed: over the rate it is 4429 instead of 4401."""
    wait, _ = await gw.quotas.check_request(anonymous(client_ip(ws)).identity)
    if wait > 0:
        return CLOSE_QUOTA, f"too many refused attempts: retry in {retry_after_header(wait)} s"
    return CLOSE_UNAUTHORIZED, exc.detail[:120]


def admit_call(gw: Gateway, source: str) -> Ticket | Refusal:
    """A slot of this process for a new call, or why not (counted in vg_calls_refused_total)."""
    verdict = gw.capacity.admit()
    if isinstance(verdict, Refusal):
        gw.metrics.calls_refused.labels(source, verdict.reason).inc()
    return verdict


async def voice_socket(ws: WebSocket) -> None:
    gw = gateway_of(ws)
    await ws.accept()
    if gw.draining:
        await ws.close(CLOSE_RESTART, "server is shutting down")
        return
    # before any other work: a refused call costs the process next to nothing
    ticket = admit_call(gw, "voice")
    if isinstance(ticket, Refusal):
        await ws.close(CLOSE_TRY_LATER, ticket.detail)
        return
    try:
        await _voice_call(gw, ws, ticket)
    finally:
        ticket.release()


async def _voice_call(gw: Gateway, ws: WebSocket, ticket: Ticket) -> None:
    agent_id = ws.path_params["agent_id"]
    try:
        principal = await _authenticate(ws, agent_id)
        agent = await gw.memory.agents.get(
            agent_id, user_id=principal.user_id, scoped=principal.scoped
        )
    except ApiError as exc:
        log.warning("voice socket for agent %s refused: %s", agent_id[:80], exc.detail)
        await ws.close(*await refusal(gw, ws, exc))
        return
    except NotFound:
        await ws.close(CLOSE_NOT_FOUND, "agent not found")
        return
    voice = gw.voice
    if voice is None:
        await ws.close(1011, "voice services are not available")
        return
    try:
        guard = await gw.quotas.open_call(principal.identity)
    except QuotaExceeded as exc:
        log.warning("voice call of %s refused: %s", principal.identity, exc.detail)
        await ws.close(CLOSE_QUOTA, exc.detail[:120])
        return
    transport = BrowserTransport(ws, agent_id)
    rule = CallerRule(bound=principal.caller, may_choose=not principal.by_token)
    session = VoiceSession(gw, voice, transport, agent, caller=rule)
    session.watchers.append(lambda: guard.watch(quota_ender(transport)))
    await run_call(gw, session, guard, ticket=ticket)


def quota_ender(transport: Transport) -> Callable[[], Awaitable[None]]:
    """How a call ends when its identity's call minutes run out: a fatal `error` event
    (`quota_exceeded`), then close 4429."""

    async def end() -> None:
        await transport.error(
            "quota_exceeded", "the call minutes for today are used up", fatal=True
        )
        await transport.close(CLOSE_QUOTA, "call minutes used up")

    return end


async def run_call(
    gw: Gateway,
    session: VoiceSession,
    guard: CallGuard,
    info: StartInfo | None = None,
    ticket: Ticket | None = None,
) -> None:
    """Run an admitted call; its minutes are counted and its slots (the identity's and the
    process's) freed however it ends."""
    record_id: str | None = None
    try:
        record_id = await gw.calls.enter(session)  # and its call record
        await session.run(info)
    finally:
        try:
            await gw.calls.leave(session, record_id, "server_shutdown" if gw.draining else None)
        finally:
            if ticket is not None:
                ticket.release()
            await guard.close()


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/agents/{agent_id}/voice/sessions", create_voice_session, methods=["POST"]),
        WebSocketRoute("/v1/agents/{agent_id}/voice", voice_socket),
    ]
