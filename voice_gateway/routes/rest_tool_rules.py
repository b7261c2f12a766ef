"""Tool rules on agents (Letta's `tool_rules`) and a tool's approval requirement
(`PATCH /v1/agents/{agent_id}/tools/approval/{tool_name}`). The rules are enforced by the
agent loop (agents/tools/rules.py); here they are only checked and stored."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.tools import REGISTRY
from agents.tools.rules import dump_rules, parse_rules, unknown_tools
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.routes.agent_state import agent_out
from voice_gateway.routes.http import load_json


async def checked_rules(
    request: Request, rules: list[dict[str, Any]], user_id: str | None
) -> list[dict[str, Any]]:
    """The rules as stored (normalized, each once), or a 422 naming what is wrong: a malformed
    rule or a tool no one knows."""
    try:
        parsed = parse_rules(rules)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(422, f"tool_rules.{where}: {first['msg']}") from exc
    known = set(REGISTRY.names()) | await gateway_of(request).memory.tools.names(user_id)
    unknown = unknown_tools(parsed, known)
    if unknown:
        raise ApiError(422, f"tool_rules name unknown tools: {', '.join(unknown)}")
    unique: list[dict[str, Any]] = []
    for rule in dump_rules(parsed):  # the same rule twice is one rule, as Letta keeps it
        if rule not in unique:
            unique.append(rule)
    return unique


async def update_approval(request: Request) -> JSONResponse:
    """Set whether calls of an agent's tool wait for a person's approval (`requires_approval`
    in the body, or the query as older clients send it)."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    name = request.path_params["tool_name"]
    raw = await request.body()
    body = load_json(raw) if raw.strip() else {}
    flag = body.get("requires_approval") if isinstance(body, dict) else None
    if flag is None and "requires_approval" in request.query_params:
        flag = request.query_params["requires_approval"].lower() == "true"
    if not isinstance(flag, bool):
        raise ApiError(422, "requires_approval: a boolean is required")
    if name not in agent.tool_names:
        raise ApiError(404, f"tool '{name}' is not attached to agent {agent.id}")
    updated = await gw.memory.agents.set_approval(agent.id, name, flag)
    return JSONResponse(await agent_out(request, updated))


def routes() -> list[BaseRoute]:
    path = "/v1/agents/{agent_id}/tools/approval/{tool_name}"
    return [Route(path, update_approval, methods=["PATCH"])]
