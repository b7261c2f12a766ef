"""Twilio: the voice webhook (TwiML that connects a Media Stream) and the media socket."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket
from twilio.request_validator import RequestValidator
from twilio.twiml.voice_response import Connect, VoiceResponse

from memory.calls import CallData, CallStore
from memory.models import AgentData, NotFound
from voice_gateway.auth import Principal
from voice_gateway.callers import masked, normalize_phone
from voice_gateway.capacity import RETRY_AFTER_S, Refusal, Ticket
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.outbound_calls import AMD_PATH, STATUS_PATH
from voice_gateway.pipeline.callers import CallerRule
from voice_gateway.pipeline.session import VoiceSession
from voice_gateway.pipeline.transport import (
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_NOT_FOUND,
    CLOSE_QUOTA,
    CLOSE_RESTART,
    CLOSE_TRY_LATER,
)
from voice_gateway.pipeline.voicemail import Voicemail
from voice_gateway.protocol.twilio import TwilioTransport
from voice_gateway.quotas import QuotaExceeded
from voice_gateway.routes.voice_ws import admit_call, quota_ender, refusal, run_call
from voice_gateway.twilio_rest import TwilioRest

log = logging.getLogger(__name__)
MEDIA_PATH = "/v1/telephony/twilio/media"
# Twilio's AnsweredBy values (async AMD)
ANSWERED_BY = (
    *("human", "machine_start", "machine_end_beep", "machine_end_silence"),
    *("machine_end_other", "fax", "unknown"),
)
# Twilio's CallStatus values
STATUSES = (
    *("queued", "initiated", "ringing", "in-progress"),
    *("completed", "busy", "no-answer", "failed", "canceled"),
)


def _public_url(request: Request) -> str:
    """The URL Twilio signed: VG_PUBLIC_URL (behind a proxy) or the request's own (with the
    scheme a proxy reports in X-Forwarded-Proto)."""
    public = gateway_of(request).settings.public_url
    if public:
        url = public.rstrip("/") + request.url.path
        return f"{url}?{request.url.query}" if request.url.query else url
    proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    return str(request.url.replace(scheme=proto or request.url.scheme))


def _media_url(request: Request) -> str:
    public = gateway_of(request).settings.public_url
    if public:
        base = public.rstrip("/").replace("https://", "wss://").replace("http://", "ws://")
        return base + MEDIA_PATH
    proto = request.headers.get("x-forwarded-proto", request.url.scheme)
    scheme = "wss" if proto == "https" else "ws"
    return f"{scheme}://{request.headers.get('host', request.url.netloc)}{MEDIA_PATH}"


async def signed_form(request: Request) -> dict[str, str]:
    """Twilio's form, its X-Twilio-Signature checked with the auth token (403 if bad)."""
    gw = gateway_of(request)
    form = {k: str(v) for k, v in (await request.form()).items()}
    token = gw.settings.twilio_auth_token
    if token:
        signature = request.headers.get("x-twilio-signature", "")
        if not RequestValidator(token).validate(_public_url(request), form, signature):
            log.warning("twilio request with a bad X-Twilio-Signature refused")
            raise ApiError(403, "invalid X-Twilio-Signature")
    elif gw.settings.api_key:
        # the webhook issues media-stream tokens: on a keyed gateway only signed requests may
        raise ApiError(403, "set VG_TWILIO_AUTH_TOKEN to accept Twilio calls on a keyed gateway")
    return form


async def voice_webhook(request: Request) -> Response:
    gw = gateway_of(request)
    form = await signed_form(request)
    agent_id = request.query_params.get("agent_id") or form.get("agent_id")
    if not agent_id:
        raise ApiError(400, "agent_id query parameter is required")
    if (busy := gw.capacity.refusal()) is not None:
        return over_capacity(gw, busy)
    if not await gw.memory.agents.exists(agent_id):
        raise ApiError(404, f"agent not found: {agent_id}")
    # the caller is the call's From number, bound into the stream's token (never logged whole);
    # on an outbound call (call_id: routes/calls.py), the person called, as the record names
    caller = normalize_phone(form.get("From", ""))
    call_id = request.query_params.get("call_id")
    if call_id:
        record = await CallStore(gw.memory.db).get(call_id)
        if record.agent_id != agent_id:
            raise ApiError(404, f"call not found: {call_id[:80]}")
        caller = record.caller
    session_token, _ = gw.auth.issue_token(agent_id, Principal(), caller)
    log.info("twilio call for agent %s from %s", agent_id[:80], masked(caller))
    connect = Connect()
    stream = connect.stream(url=_media_url(request))
    stream.parameter(name="agent_id", value=agent_id)
    stream.parameter(name="token", value=session_token)
    if call_id:
        stream.parameter(name="call_id", value=call_id)
    twiml = VoiceResponse()
    twiml.append(connect)
    return Response(str(twiml.to_xml()), media_type="application/xml")


def over_capacity(gw: Gateway, busy: Refusal) -> Response:
    """The webhook's answer when this process is at capacity: 503 (Retry-After), which makes
    Twilio request the number's Fallback URL (another instance or region); the TwiML body
    (busy) is what a platform that reads error bodies plays. Nothing is connected."""
    gw.metrics.calls_refused.labels("twilio_webhook", busy.reason).inc()
    twiml = VoiceResponse()
    twiml.reject(reason="busy")
    return Response(
        str(twiml.to_xml()),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
        media_type="application/xml",
    )


async def media_socket(ws: WebSocket) -> None:
    gw = gateway_of(ws)
    await ws.accept()
    if gw.draining:
        await ws.close(CLOSE_RESTART, "server is shutting down")
        return
    ticket = admit_call(gw, "phone")
    if isinstance(ticket, Refusal):  # filled up since the webhook answered
        await ws.close(CLOSE_TRY_LATER, ticket.detail)
        return
    try:
        await _media_call(gw, ws, ticket)
    finally:
        ticket.release()


async def _media_call(gw: Gateway, ws: WebSocket, ticket: Ticket) -> None:
    transport = TwilioTransport(ws, TwilioRest.of(gw.settings))  # (REST: call control)
    info = await transport.start_within(gw.settings.idle_timeout_s)
    if info is None:
        return
    bound: str | None = None
    token = info.extra.get("token", "")
    if gw.settings.api_key or gw.settings.twilio_auth_token or token:
        try:
            bound = gw.auth.verify_token(token, info.agent_id).caller
        except ApiError as exc:
            log.warning("twilio media stream rejected: %s", exc.detail)
            await transport.close(*await refusal(gw, ws, exc))  # counted against the IP
            return
    try:
        agent = await gw.memory.agents.get(info.agent_id)
    except NotFound:
        log.warning("twilio media stream for unknown agent %s", info.agent_id)
        await transport.close(CLOSE_NOT_FOUND, "agent not found")
        return
    if gw.voice is None:
        await transport.close(CLOSE_INTERNAL, "voice services are not available")
        return
    # a phone call counts against the agent's owner (no API key comes with it)
    identity = f"user:{agent.user_id}" if agent.user_id else "admin"
    try:
        guard = await gw.quotas.open_call(identity)
    except QuotaExceeded as exc:
        log.warning("twilio call %s of %s refused: %s", transport.call_sid, identity, exc.detail)
        await transport.close(CLOSE_QUOTA, exc.detail[:120])
        return
    rule = CallerRule(bound=bound, platform_call_id=True)
    record = await _outbound(gw, info.extra.get("call_id"), agent.id, bound)
    first = record.options.get("first_message") if record is not None else None
    first = first if isinstance(first, str) else None
    # an outbound call greets the person called by its first_message
    session = VoiceSession(gw, gw.voice, transport, agent, caller=rule, first_message=first)
    if record is not None:
        _watch_voicemail(gw, session, record, agent)
    session.watchers.append(lambda: guard.watch(quota_ender(transport)))
    try:
        await run_call(gw, session, guard, info, ticket)
    finally:
        if transport.dropped:
            log.info("twilio stream %s: dropped frames %s", transport.stream_sid, transport.dropped)
        await transport.close(CLOSE_NORMAL, "call ended")  # no-op if already closed


async def _outbound(
    gw: Gateway, call_id: object, agent_id: str, caller: str | None
) -> CallData | None:
    """The record of the outbound call a stream belongs to (of this agent and of the caller
    the stream's token is bound to), else None."""
    if not isinstance(call_id, str) or not call_id:
        return None
    try:
        record = await CallStore(gw.memory.db).get(call_id)
    except NotFound:
        return None
    if record.agent_id != agent_id or record.caller != caller:
        return None
    return record if record.direction == "outbound" else None


def _watch_voicemail(
    gw: Gateway, session: VoiceSession, record: CallData, agent: AgentData
) -> None:
    """An outbound call listens for an answering machine (pipeline/voicemail.py)."""
    vm = Voicemail(CallStore(gw.memory.db), record.id, agent.voicemail_message)
    vm.bind(session)
    session.voicemail = vm
    session.watchers.append(vm.run)


async def _callback_of(request: Request, gw: Gateway) -> tuple[dict[str, str], CallStore, CallData]:
    """A signed callback of an outbound call: its form, the call store and the call's record
    (by `call_id`, else by CallSid; 404 when unknown or the CallSid is another call's)."""
    form = await signed_form(request)
    store = CallStore(gw.memory.db)
    call_id = request.query_params.get("call_id")
    sid = form.get("CallSid", "")
    record = await store.get(call_id) if call_id else await store.by_vendor_id(sid)
    if record is None or (sid and record.vendor_call_id not in (None, sid)):
        raise ApiError(404, "call not found")
    return form, store, record


async def status_callback(request: Request) -> Response:
    """Twilio's status callback of an outbound call (signed like the voice webhook): the status
    joins the record's history; a final one (completed, busy, no-answer, failed, canceled)
    ends the record with its end reason, and a call that ended unanswered gets its `call.ended`
    webhook here (docs/call_reports.md). AnsweredBy (machine detection) goes in metadata."""
    gw = gateway_of(request)
    form, store, record = await _callback_of(request, gw)
    status = form.get("CallStatus", "")
    if status not in STATUSES:
        raise ApiError(422, f"CallStatus must be one of {', '.join(STATUSES)}")
    extra = {"answered_by": form["AnsweredBy"]} if form.get("AnsweredBy") else None
    sid = form.get("CallSid", "")
    updated = await store.update(
        record.id, status=status, vendor_call_id=sid or None, metadata=extra
    )
    log.info("call %s: twilio status %s", record.id, status)
    if updated.ended and updated.answered_at is None and gw.call_webhooks is not None:
        # never answered (busy, no answer, failed, canceled): no call reports its own end
        await gw.call_webhooks.call_ended(updated)
    return Response(status_code=204)


async def amd_callback(request: Request) -> Response:
    """Twilio's async AMD callback of an outbound call (signed like the voice webhook):
    AnsweredBy goes in the record's metadata and to the live call, which leaves its voicemail
    message on a machine (pipeline/voicemail.py)."""
    gw = gateway_of(request)
    form, store, record = await _callback_of(request, gw)
    answered_by = form.get("AnsweredBy", "")
    if answered_by not in ANSWERED_BY:
        raise ApiError(422, f"AnsweredBy must be one of {', '.join(ANSWERED_BY)}")
    await store.update(record.id, metadata={"answered_by": answered_by})
    live = gw.calls.by_record(record.id)
    if isinstance(live, VoiceSession) and live.voicemail is not None:
        live.voicemail.vendor(answered_by)
    log.info("call %s: twilio answered_by %s", record.id, answered_by)
    return Response(status_code=204)


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/telephony/twilio/voice", voice_webhook, methods=["POST"]),
        Route(STATUS_PATH, status_callback, methods=["POST"]),
        Route(AMD_PATH, amd_callback, methods=["POST"]),
        WebSocketRoute(MEDIA_PATH, media_socket),
    ]
