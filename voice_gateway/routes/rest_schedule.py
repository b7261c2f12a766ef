"""Scheduled messages (letta-client's `agents.schedule`): messages sent to an agent once at a
time (`scheduled_at`, Unix milliseconds) or on a cron expression (UTC). The scheduler
(voice_gateway/scheduler.py) sends each due one as a background run. With `call` (ours) a
schedule places a phone call instead, checked here as `POST /v1/agents/{id}/calls` checks one.
Another user's agent, an unknown schedule or another agent's schedule is a 404."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from memory.ids import utcnow
from memory.schedules import ScheduleData, ScheduleStore
from voice_gateway.cron import CronError
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.outbound_calls import NO_TWILIO, PlaceCall, dial_out_refusal
from voice_gateway.protocol.letta_schedule import (
    CALL_BASE,
    OneTime,
    ScheduleCreate,
    schedule_json,
)
from voice_gateway.routes.calls import base_url
from voice_gateway.routes.http import parse_body, query_int
from voice_gateway.scheduler import parse_cron
from voice_gateway.twilio_rest import TwilioRest


async def _scope(request: Request) -> tuple[ScheduleStore, str]:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    return ScheduleStore(gw.memory.db), agent.id


async def create_schedule(request: Request) -> JSONResponse:
    """Schedule messages to the agent: once (`schedule.scheduled_at`, Unix milliseconds, in the
    future) or recurring (`schedule.cron_expression`, UTC) → `{id, next_scheduled_at}`."""
    gw = gateway_of(request)
    store, agent_id = await _scope(request)
    body = await parse_body(request, ScheduleCreate)
    message = body.stored()
    if body.call is not None:
        _check_call(gw, body, body.call)
        message[CALL_BASE] = base_url(request)
    elif not body.has_text():
        raise ApiError(422, "messages must include a user or system message with text content")
    now = utcnow()
    if isinstance(body.schedule, OneTime):
        ms = body.schedule.scheduled_at
        when = datetime.fromtimestamp(ms / 1000, UTC)
        if when <= now:
            raise ApiError(
                422,
                f"schedule.scheduled_at is in the past: {when.isoformat()} (it is Unix time in "
                f"milliseconds; now is {int(now.timestamp() * 1000)})",
            )
        saved = await store.create(agent_id, message=message, next_run_at=when, scheduled_at=ms)
    else:
        expression = body.schedule.cron_expression.strip()
        try:
            nxt = parse_cron(gw, expression).next_after(now)
        except CronError as exc:
            raise ApiError(422, f"schedule.cron_expression: {exc}") from None
        if nxt is None:
            raise ApiError(422, f"schedule.cron_expression: {expression!r} names no time")
        saved = await store.create(
            agent_id, message=message, next_run_at=nxt, cron_expression=expression
        )
    return JSONResponse({"id": saved.id, "next_scheduled_at": _iso(saved)})


def _check_call(gw: Gateway, body: ScheduleCreate, call: PlaceCall) -> None:
    """A scheduled call is checked as `POST /v1/agents/{id}/calls` checks one (its call slots
    and quota when it fires); a 422 names the field."""
    if body.messages:
        raise ApiError(422, "call: a schedule places a call or sends messages, not both")
    if (why := dial_out_refusal(gw, call.to)) is not None:
        raise ApiError(422, f"call.to: {why}")
    call.caller_key("call.caller")
    if TwilioRest.of(gw.settings) is None:
        raise ApiError(422, f"call: {NO_TWILIO}")  # not this gateway: no later try helps


def _iso(s: ScheduleData) -> str:
    return s.next_run_at.isoformat()


async def list_schedules(request: Request) -> JSONResponse:
    """The agent's scheduled messages in creation order (`after`: a schedule id, `limit`)."""
    store, agent_id = await _scope(request)
    page, more = await store.page(
        agent_id,
        after=request.query_params.get("after") or None,
        limit=query_int(request, "limit", 50),
    )
    return JSONResponse(
        {"has_next_page": more, "scheduled_messages": [schedule_json(s) for s in page]}
    )


async def get_schedule(request: Request) -> JSONResponse:
    """A scheduled message of the agent."""
    store, agent_id = await _scope(request)
    sid = request.path_params["scheduled_message_id"]
    return JSONResponse(schedule_json(await store.get(agent_id, sid)))


async def delete_schedule(request: Request) -> JSONResponse:
    """Delete a scheduled message: it is not sent (a run it already started goes on)."""
    store, agent_id = await _scope(request)
    await store.delete(agent_id, request.path_params["scheduled_message_id"])
    return JSONResponse({"success": True})


def routes() -> list[BaseRoute]:
    base = "/v1/agents/{agent_id}/schedule"
    return [
        Route(base, create_schedule, methods=["POST"]),
        Route(f"{base}/", create_schedule, methods=["POST"]),
        Route(base, list_schedules, methods=["GET"]),
        Route(f"{base}/", list_schedules, methods=["GET"]),
        Route(base + "/{scheduled_message_id}", get_schedule, methods=["GET"]),
        Route(base + "/{scheduled_message_id}", delete_schedule, methods=["DELETE"]),
    ]
