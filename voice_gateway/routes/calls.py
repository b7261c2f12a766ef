"""Call records and outbound calls: `GET /v1/calls/` (agent_id, status, caller; limit, after,
order), `GET /v1/calls/{call_id}`, `GET /v1/calls/{call_id}/report` (the post-call report:
voice_gateway/call_reports.py), `DELETE /v1/calls/{call_id}` (hang up) and
`POST /v1/agents/{agent_id}/calls` (place a Twilio call). A call is its agent owner's: another
user's call is a 404 like an unknown one."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.status import WS_1000_NORMAL_CLOSURE

from memory.calls import CallData, CallStore
from memory.identities import BadCallerKey, check_caller_key
from voice_gateway.call_reports import call_json, call_report
from voice_gateway.callers import masked
from voice_gateway.capacity import RETRY_AFTER_S
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.outbound_calls import PlaceCall, allowlist, check_dial_out
from voice_gateway.quotas import QuotaExceeded
from voice_gateway.routes.http import parse_body, query_choice, query_int
from voice_gateway.twilio_rest import OutboundCall, TwilioRest, TwilioUnavailable

log = logging.getLogger(__name__)
VOICE_PATH = "/v1/telephony/twilio/voice"
STATUS_PATH = "/v1/telephony/twilio/status"
AMD_PATH = "/v1/telephony/twilio/amd"


def base_url(request: Request) -> str:
    """Where Twilio reaches this gateway: VG_PUBLIC_URL, else the request's own origin."""
    public = gateway_of(request).settings.public_url
    if public:
        return public.rstrip("/")
    proto = request.headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    return f"{proto or request.url.scheme}://{request.url.netloc}"


async def _call_of(request: Request) -> tuple[Gateway, CallData]:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    store = CallStore(gw.memory.db)
    call = await store.get(request.path_params["call_id"], user_id=p.user_id, scoped=p.scoped)
    return gw, call


async def list_calls(request: Request) -> JSONResponse:
    """List calls (agent_id, status, caller; limit, after, order asc|desc)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    agent_id = q.get("agent_id")
    if agent_id:
        agent_id = (await gw.auth.agent(request, agent_id)).id  # 404 if not yours
    order = query_choice(request, "order", ("asc", "desc"), "desc")
    calls = await CallStore(gw.memory.db).page(
        user_id=p.user_id,
        scoped=p.scoped,
        agent_id=agent_id,
        status=q.get("status") or None,
        caller=q.get("caller") or None,
        after=q.get("after") or None,
        limit=query_int(request, "limit", 50),
        ascending=order == "asc",
    )
    return JSONResponse([call_json(c) for c in calls])


async def get_call(request: Request) -> JSONResponse:
    """Retrieve a call record."""
    _, call = await _call_of(request)
    return JSONResponse(call_json(call))


async def get_report(request: Request) -> JSONResponse:
    """Retrieve a call's report: its record, transcript, per-turn latencies and recording."""
    gw, call = await _call_of(request)
    live = gw.calls.by_record(call.id)
    conversation_id = live.conversation_id if live is not None else None
    return JSONResponse(await call_report(gw.memory.db, call, conversation_id))


async def hang_up(request: Request) -> JSONResponse:
    """Hang up a call: a live call on this gateway is ended; a Twilio call is completed over
    Twilio's REST API. An ended call is returned as it is."""
    gw, call = await _call_of(request)
    if call.ended:
        return JSONResponse(call_json(call))
    live = gw.calls.by_record(call.id)
    rest = TwilioRest.of(gw.settings) if call.transport == "twilio" else None
    if live is None and (rest is None or call.vendor_call_id is None):
        raise ApiError(409, "the call is not live on this gateway and has no Twilio call to end")
    if rest is not None and call.vendor_call_id is not None:
        try:
            await rest.complete(call.vendor_call_id)
        except TwilioUnavailable as exc:
            if live is None:
                raise ApiError(502, exc.detail) from exc
            log.warning("call %s: Twilio hang-up failed (%s)", call.id, exc.detail)
    if live is not None:
        await live.transport.close(WS_1000_NORMAL_CLOSURE, "call ended by the API")
    store = CallStore(gw.memory.db)
    ended = await store.update(call.id, status="completed", end_reason="hung_up_by_api")
    log.info("call %s hung up by the API", call.id)
    return JSONResponse(call_json(ended))


async def place_call(request: Request) -> JSONResponse:
    """Place an outbound phone call (Twilio): the person called talks to the agent."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])  # 404 if not yours
    body = await parse_body(request, PlaceCall)
    check_dial_out(body.to, allowlist(gw.settings.dial_out_allowlist))
    rest = TwilioRest.of(gw.settings)
    if rest is None:
        raise ApiError(503, "outbound calls need TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
    try:
        caller = check_caller_key(body.caller) if body.caller is not None else body.to
    except BadCallerKey as exc:
        raise ApiError(422, f"caller: {exc}") from exc
    if (busy := gw.capacity.refusal()) is not None:
        raise ApiError(503, busy.detail, {"Retry-After": str(RETRY_AFTER_S)})
    # the call counts against the agent's owner, as its media stream will (routes/twilio.py)
    identity = f"user:{agent.user_id}" if agent.user_id else "admin"
    try:
        await (await gw.quotas.open_call(identity)).close()  # a free slot and minutes left
    except QuotaExceeded as exc:
        raise ApiError(429, exc.detail) from exc
    store = CallStore(gw.memory.db)
    options = {"first_message": body.first_message, "machine_detection": body.machine_detection}
    record = await store.create(
        agent.id,
        user_id=agent.user_id,
        direction="outbound",
        transport="twilio",
        status="queued",
        caller=caller,
        options={**options, "record": body.record},
        metadata=body.metadata,
    )
    base = base_url(request)
    twiml_url = f"{base}{VOICE_PATH}?{urlencode({'agent_id': agent.id, 'call_id': record.id})}"
    outbound = OutboundCall(
        to=body.to,
        from_=body.from_,
        twiml_url=twiml_url,
        status_url=f"{base}{STATUS_PATH}?{urlencode({'call_id': record.id})}",
        machine_detection=body.machine_detection,
        amd_url=f"{base}{AMD_PATH}?{urlencode({'call_id': record.id})}",
        record=body.record,
    )
    try:
        sid = await rest.create_call(outbound)
    except TwilioUnavailable as exc:
        await store.update(record.id, status="failed", end_reason="failed")
        log.warning("outbound call %s to %s failed: %s", record.id, masked(body.to), exc.detail)
        raise ApiError(502, exc.detail) from exc
    record = await store.update(record.id, vendor_call_id=sid)
    log.info("outbound call %s to %s placed (agent %s)", record.id, masked(body.to), agent.id)
    return JSONResponse(call_json(record), 201, {"Location": f"/v1/calls/{record.id}"})


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/calls/", list_calls, methods=["GET"]),
        Route("/v1/calls/{call_id}", get_call, methods=["GET"]),
        Route("/v1/calls/{call_id}/report", get_report, methods=["GET"]),
        Route("/v1/calls/{call_id}", hang_up, methods=["DELETE"]),
        Route("/v1/agents/{agent_id}/calls", place_call, methods=["POST"]),
    ]
