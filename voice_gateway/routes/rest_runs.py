"""Runs and steps (Letta's `client.runs`, `client.steps`), background runs
(`/messages/async`) and cancel. The agent loop writes the records; these routes only read
them (and a step's feedback). A run is visible to whoever may see its agent; another user's
run is a 404 like an unknown one."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any

from sqlalchemy import select
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from agents.events import AgentEvent, MessageSaved, RunDone
from agents.llm import Usage
from memory.ids import new_id
from memory.models import NotFound
from memory.orm import Run, Step
from memory.runs import ACTIVE, RunData, StepData
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of
from voice_gateway.protocol.letta_runs import (
    CALLBACK_KEY,
    AsyncMessagesRequest,
    CancelRequest,
    FeedbackRequest,
    RunStream,
    metrics_json,
    run_json,
    step_json,
    usage_json,
)
from voice_gateway.routes import conversation_access as access
from voice_gateway.routes.http import parse_body, query_bool, query_choice, query_int
from voice_gateway.routes.rest_messages import (
    messages_json,
    query_message_types,
    sse_events,
    sse_frames,
)
from voice_gateway.routes.rest_messages import turn_input as message_turn
from voice_gateway.run_mirror import ORPHANED
from voice_gateway.runs import ActiveRun


def _order(request: Request, default: str = "desc") -> Any:
    q = request.query_params
    if "ascending" in q and "order" not in q:
        return "asc" if query_bool(request, "ascending", False) else "desc"
    return query_choice(request, "order", ("asc", "desc"), default)


async def _agent_scope(request: Request) -> tuple[str | None, list[str] | None]:
    """(agent_id, None) when the request names one agent (404 if not yours), else
    (None, the agents you may see; None: all)."""
    agent_id = request.query_params.get("agent_id")
    if agent_id:
        return (await gateway_of(request).auth.agent(request, agent_id)).id, None
    return None, await access.visible_agent_ids(request)


async def run_of(request: Request, run_id: str) -> RunData:
    """The run if you may see its agent; one still starting (not stored yet) from the
    registry of this process."""
    gw = gateway_of(request)
    try:
        run = await gw.memory.runs.get(run_id)
    except NotFound:
        active = gw.runs.find(run_id)
        if active is None:
            raise
        status = "completed" if active.done else "running"
        run = RunData(id=run_id, agent_id=active.agent_id, status=status)
        run.conversation_id = active.conversation_id
    try:
        await gw.auth.agent(request, run.agent_id)
    except NotFound:
        raise NotFound("run", run_id) from None
    if run.status == "created":  # a background run under way here, before its first step
        active = gw.runs.find(run_id)
        if active is not None and active.events and not active.done:
            run.status = "running"
    return run


async def step_of(request: Request, step_id: str) -> StepData:
    gw = gateway_of(request)
    step = await gw.memory.runs.get_step(step_id)
    try:
        await gw.auth.agent(request, step.agent_id)
    except NotFound:
        raise NotFound("step", step_id) from None
    return step


def _rid(request: Request) -> str:
    return str(request.path_params["run_id"])


async def list_runs(request: Request) -> JSONResponse:
    """List runs (agent_id, conversation_id, statuses, stop_reason, active, background)."""
    q = request.query_params
    agent_id, visible = await _agent_scope(request)
    query = select(Run)
    ids = q.getlist("agent_ids")
    if agent_id is not None:
        query = query.where(Run.agent_id == agent_id)
    elif ids:
        gw = gateway_of(request)
        mine = [(await gw.auth.agent(request, i)).id for i in ids]  # 404 if not yours
        query = query.where(Run.agent_id.in_(mine))
    elif visible is not None:
        query = query.where(Run.agent_id.in_(visible))
    if cid := q.get("conversation_id"):
        query = query.where(Run.conversation_id == cid)
    if statuses := q.getlist("statuses"):
        query = query.where(Run.status.in_(statuses))
    if reason := q.get("stop_reason"):
        query = query.where(Run.stop_reason == reason)
    if "active" in q and query_bool(request, "active", False):
        query = query.where(Run.status.in_(ACTIVE))
    if "background" in q:
        query = query.where(Run.background.is_(query_bool(request, "background", False)))
    runs = await gateway_of(request).memory.runs.page(
        query,
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order=_order(request),
    )
    return JSONResponse([run_json(r) for r in runs])


async def get_run(request: Request) -> JSONResponse:
    """Retrieve a run."""
    return JSONResponse(run_json(await run_of(request, _rid(request))))


async def run_usage(request: Request) -> JSONResponse:
    """A run's token usage."""
    return JSONResponse(usage_json(await run_of(request, _rid(request))))


async def run_messages(request: Request) -> JSONResponse:
    """The messages a run stored (limit, after, before, order)."""
    run = await run_of(request, _rid(request))
    q = request.query_params
    config = run.request_config or {}  # an async run's request: its message types and shape
    kinds = query_message_types(request)
    if kinds is None and config.get("include_return_message_types"):
        kinds = frozenset(config["include_return_message_types"])
    assistant = query_bool(
        request, "use_assistant_message", config.get("use_assistant_message", True)
    )
    rows = await gateway_of(request).memory.messages.page(
        run.agent_id,
        turn_id=run.id,
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order=_order(request, "asc"),  # a run's messages read as they happened (Letta's)
    )
    return JSONResponse(messages_json(rows, kinds, assistant))


async def run_steps(request: Request) -> JSONResponse:
    """A run's steps (limit, after, before, order)."""
    run = await run_of(request, _rid(request))
    q = request.query_params
    steps = await gateway_of(request).memory.runs.steps(
        select(Step).where(Step.run_id == run.id),
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order=_order(request),
    )
    return JSONResponse([step_json(s) for s in steps])


async def stream_run(request: Request) -> Response:
    """Attach to a run's stream from `starting_after` (a seq_id) on: live while it runs in
    this gateway, else its stored messages and outcome."""
    gw = gateway_of(request)
    run = await run_of(request, _rid(request))
    body = await parse_body(request, RunStream)
    active = gw.runs.find(run.id)
    if active is not None:
        start = min(body.starting_after, len(active.events))
        return sse_events(gw, lambda: active.follow(start), active.tokens, False, start)
    mirror = gw.run_mirror
    if mirror is not None and run.background and await _mirrored(mirror, run):
        frames = mirror.replay(run.id, body.starting_after, lambda: orphaned(gw, run.id))
        return StreamingResponse(
            frames, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
    if mirror is not None and run.status in ACTIVE and not await mirror.owned(run.id):
        await gw.memory.runs.mark_failed(run.id, ORPHANED)  # its gateway crashed
        run = await gw.memory.runs.get(run.id)
    rows = await gw.memory.messages.page(run.agent_id, turn_id=run.id, limit=1000, order="asc")

    async def stored() -> AsyncGenerator[AgentEvent, None]:
        for m in rows[body.starting_after :]:
            yield MessageSaved(m)
        if run.stop_reason is not None:
            usage = Usage(run.prompt_tokens, run.completion_tokens)
            yield RunDone(run.id, run.stop_reason, usage, run.step_count, "", run.error)  # type: ignore[arg-type]

    return sse_events(gw, stored, False, False, body.starting_after)


async def _mirrored(mirror: Any, run: RunData) -> bool:
    """Its frames are in Redis, or will be (another gateway runs it now)."""
    if await mirror.has(run.id):
        return True
    return run.status in ACTIVE and bool(await mirror.owned(run.id))


async def orphaned(gw: Gateway, run_id: str) -> list[str]:
    """A run whose gateway stopped: marked failed; the frames that end its stream."""
    await gw.memory.runs.mark_failed(run_id, ORPHANED)
    run = await gw.memory.runs.get(run_id)
    done = RunDone(run.id, "error", Usage(run.prompt_tokens, run.completion_tokens),
                   run.step_count, "", run.error or ORPHANED)  # fmt: skip

    async def one() -> AsyncGenerator[AgentEvent, None]:
        yield done

    return [frame async for frame in sse_frames(gw, one, False, False)]


async def send_async(request: Request) -> JSONResponse:
    """Start a background run: it goes on if the client goes away; poll it with
    `GET /v1/runs/{run_id}` or attach with `POST /v1/runs/{run_id}/stream`."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, AsyncMessagesRequest)
    active = await start_async(gw, agent, body)
    return JSONResponse(run_json(await gw.memory.runs.get(active.run_id)))


async def start_async(gw: Gateway, agent: Any, body: AsyncMessagesRequest) -> ActiveRun:
    """The background run of `body` (also what a due scheduled message sends)."""
    if body.conversation_id is not None:
        await gw.memory.conversations.get(body.conversation_id, agent.id)
    inp = await message_turn(gw, agent, body, body.conversation_id)
    config = {
        "include_return_message_types": body.include_return_message_types,
        "use_assistant_message": body.use_assistant_message,
    }
    mirror = gw.run_mirror
    if mirror is not None:  # re-attachable on any gateway: voice_gateway/run_mirror.py
        inp.turn_id = inp.turn_id or new_id("run")
        await mirror.claim(inp.turn_id)
    callback = {CALLBACK_KEY: {"url": body.callback_url}} if body.callback_url else None
    active = await gw.runs.start_background(gw.loop, agent.id, inp, config, callback)
    if body.callback_url:  # POSTed the outcome when the run ends: voice_gateway/run_callbacks.py
        gw.run_callbacks.watch(active, body.callback_url)
    if mirror is not None:
        mirror.publish(active.run_id, sse_frames(gw, lambda: active.follow(0), True, False))
    return active


async def cancel_runs(request: Request) -> JSONResponse:
    """Cancel the agent's running turns (`run_ids`: only those); each keeps what it had.
    No `run_ids` and nothing running is a 409, as in Letta."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, CancelRequest)
    cancelled = await gw.runs.cancel_agent(agent.id, body.run_ids)
    if not cancelled and not body.run_ids:
        raise ApiError(409, f"No active runs to cancel for agent {agent.id}")
    return JSONResponse({run_id: "cancelled" for run_id in cancelled})


def _date(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(422, f"{name} must be an ISO 8601 date-time") from None


async def list_steps(request: Request) -> JSONResponse:
    """List steps (agent_id, model, feedback, has_feedback, tags, start_date, end_date)."""
    q = request.query_params
    agent_id, visible = await _agent_scope(request)
    query = select(Step)
    if agent_id is not None:
        query = query.where(Step.agent_id == agent_id)
    elif visible is not None:
        query = query.where(Step.agent_id.in_(visible))
    if model := q.get("model"):
        query = query.where((Step.model == model) | Step.model.endswith("/" + model))
    if feedback := q.get("feedback"):
        query = query.where(Step.feedback == feedback)
    if "has_feedback" in q:
        has = query_bool(request, "has_feedback", False)
        query = query.where(Step.feedback.is_not(None) if has else Step.feedback.is_(None))
    if (start := _date(request, "start_date")) is not None:
        query = query.where(Step.created_at >= start)
    if (end := _date(request, "end_date")) is not None:
        query = query.where(Step.created_at <= end)
    steps = await gateway_of(request).memory.runs.steps(
        query,
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order=_order(request),
    )
    tags = set(q.getlist("tags"))
    return JSONResponse([step_json(s) for s in steps if tags <= set(s.tags)])


def _sid(request: Request) -> str:
    return str(request.path_params["step_id"])


async def get_step(request: Request) -> JSONResponse:
    """Retrieve a step."""
    return JSONResponse(step_json(await step_of(request, _sid(request))))


async def step_metrics(request: Request) -> JSONResponse:
    """A step's timings (ns), with its voice turn's latencies (ms) as `voice_metrics`."""
    step = await step_of(request, _sid(request))
    run = await gateway_of(request).memory.runs.get(step.run_id)
    return JSONResponse(metrics_json(step, run))


async def step_messages(request: Request) -> JSONResponse:
    """The messages a step stored."""
    step = await step_of(request, _sid(request))
    q = request.query_params
    rows = await gateway_of(request).memory.messages.page(
        step.agent_id,
        step_id=step.id,
        limit=query_int(request, "limit", 100),
        after=q.get("after"),
        before=q.get("before"),
        order=_order(request),
    )
    return JSONResponse(messages_json(rows, None))


async def step_feedback(request: Request) -> JSONResponse:
    """Rate a step (positive or negative) and tag it."""
    gw = gateway_of(request)
    step = await step_of(request, _sid(request))
    body = await parse_body(request, FeedbackRequest)
    await gw.memory.runs.feedback(step.id, body.feedback, body.tags)
    return JSONResponse(step_json(await gw.memory.runs.get_step(step.id)))


def routes() -> list[BaseRoute]:
    r, s, a = "/v1/runs/{run_id}", "/v1/steps/{step_id}", "/v1/agents/{agent_id}/messages"
    return [
        Route("/v1/runs", list_runs, methods=["GET"]),
        Route("/v1/runs/", list_runs, methods=["GET"]),
        Route(r, get_run, methods=["GET"]),
        Route(f"{r}/usage", run_usage, methods=["GET"]),
        Route(f"{r}/messages", run_messages, methods=["GET"]),
        Route(f"{r}/steps", run_steps, methods=["GET"]),
        Route(f"{r}/stream", stream_run, methods=["POST"]),
        Route("/v1/steps", list_steps, methods=["GET"]),
        Route("/v1/steps/", list_steps, methods=["GET"]),
        Route(s, get_step, methods=["GET"]),
        Route(f"{s}/metrics", step_metrics, methods=["GET"]),
        Route(f"{s}/messages", step_messages, methods=["GET"]),
        Route(f"{s}/feedback", step_feedback, methods=["PATCH"]),
        Route(f"{a}/async", send_async, methods=["POST"]),
        Route(f"{a}/cancel", cancel_runs, methods=["POST"]),
    ]
