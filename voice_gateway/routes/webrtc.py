"""`/v1/agents/{agent_id}/webrtc`: WebRTC signalling (docs/webrtc.md). An SDP offer in, the
answer out; the call then runs the same `VoiceSession` as the voice socket, admitted the same
way (credentials, agent, call slot and minutes). `DELETE` on the call's URL hangs up."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from memory.models import NotFound
from voice_gateway.auth import Principal
from voice_gateway.capacity import RETRY_AFTER_S, Refusal
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.pipeline.callers import CallerRule
from voice_gateway.pipeline.session import VoiceSession
from voice_gateway.quotas import QuotaExceeded
from voice_gateway.routes.voice_ws import admit_call, quota_ender, run_call
from voice_gateway.webrtc.calls import WebRTCCalls
from voice_gateway.webrtc.offer import read_offer

log = logging.getLogger(__name__)


async def authenticate(request: Request, agent_id: str) -> Principal:
    """As the voice socket: `?session_token=`, else the bearer. A WHIP client can only send a
    bearer, so a bearer that is a session token (payload.signature) counts as one."""
    auth = gateway_of(request).auth
    token = request.query_params.get("session_token")
    if token:
        return auth.verify_token(token, agent_id)
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and "." in value:
        try:
            return auth.verify_token(value, agent_id)
        except ApiError as token_error:
            try:
                return await auth.principal(request)
            except ApiError:
                raise token_error from None
    return await auth.principal(request)


def _calls(gw: Gateway) -> WebRTCCalls:
    calls = gw.webrtc
    if calls is None or gw.voice is None:
        raise ApiError(503, "voice services are not available on this server")
    return calls


async def create_call(request: Request) -> Response:
    """Offer SDP, receive the answer: start a WebRTC voice call"""
    gw = gateway_of(request)
    agent_id = request.path_params["agent_id"]
    if gw.draining:
        raise ApiError(503, "server is shutting down: offer again (another instance answers)")
    principal = await authenticate(request, agent_id)
    try:
        agent = await gw.memory.agents.get(
            agent_id, user_id=principal.user_id, scoped=principal.scoped
        )
    except NotFound as exc:
        raise ApiError(404, f"agent not found: {agent_id[:80]}") from exc
    offer = await read_offer(request)
    calls = _calls(gw)
    assert gw.voice is not None  # set when the gateway opened with VG_VOICE
    ticket = admit_call(gw, "webrtc")
    if isinstance(ticket, Refusal):  # no ICE, no DTLS: refused before the media starts
        raise ApiError(503, ticket.detail, {"Retry-After": str(RETRY_AFTER_S)})
    try:
        guard = await gw.quotas.open_call(principal.identity)
    except QuotaExceeded as exc:
        ticket.release()
        log.warning("webrtc call of %s refused: %s", principal.identity, exc.detail)
        raise ApiError(429, exc.detail) from exc
    try:
        call = await calls.answer(agent_id, offer)
    except BaseException:
        ticket.release()
        await guard.close()
        raise
    rule = CallerRule(bound=principal.caller, may_choose=not principal.by_token)
    session = VoiceSession(gw, gw.voice, call.transport, agent, caller=rule)
    session.watchers.append(lambda: guard.watch(quota_ender(call.transport)))
    calls.run(call, lambda: run_call(gw, session, guard, ticket=ticket))
    location = f"/v1/agents/{agent_id}/webrtc/{call.id}"
    servers = calls.config.client_servers()
    if offer.whip:
        links = [f'<{u}>; rel="ice-server"' for s in servers for u in _urls(s)]
        headers = {"Location": location, **({"Link": ", ".join(links)} if links else {})}
        return Response(call.answer_sdp, 201, headers, media_type="application/sdp")
    body = {
        "type": "answer",
        "sdp": call.answer_sdp,
        "call_id": call.id,
        "location": location,
        "ice_servers": servers,
    }
    return JSONResponse(body, 201, {"Location": location})


def _urls(server: dict[str, Any]) -> list[str]:
    urls = server["urls"]
    return [urls] if isinstance(urls, str) else list(urls)


def _live(request: Request) -> tuple[WebRTCCalls, str]:
    calls = _calls(gateway_of(request))
    call_id = request.path_params["call_id"]
    call = calls.live.get(call_id)
    if call is None or call.agent_id != request.path_params["agent_id"]:
        raise ApiError(404, "no such live call (it ended, or the URL is wrong)")
    return calls, call_id


async def end_call(request: Request) -> JSONResponse:
    """Hang up a WebRTC call"""
    calls, call_id = _live(request)
    await calls.hang_up(call_id)
    return JSONResponse({"call_id": call_id, "ended": True})


async def offer_again(request: Request) -> JSONResponse:
    """A second offer on a live call: refused (no renegotiation)"""
    _, call_id = _live(request)
    raise ApiError(
        409,
        f"call {call_id[:16]}... is live and renegotiation is not supported: DELETE it and "
        f"POST a new offer to /v1/agents/{request.path_params['agent_id']}/webrtc",
    )


def routes() -> list[BaseRoute]:
    # not in /openapi.json: SDP signalling is a wire contract of its own (docs/webrtc.md), as
    # the sockets are
    call = "/v1/agents/{agent_id}/webrtc/{call_id}"
    return [
        Route(
            "/v1/agents/{agent_id}/webrtc", create_call, methods=["POST"], include_in_schema=False
        ),
        Route(call, end_call, methods=["DELETE"], include_in_schema=False),
        Route(call, offer_again, methods=["POST"], include_in_schema=False),
    ]
