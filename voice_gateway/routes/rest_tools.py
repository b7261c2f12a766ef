"""Tools (Letta paths): built-ins, custom Python tools (schema read from the source, runs in the
sandbox), and attaching tools to agents. Another user's tool is 404; the server's tools (made
with the server key) are visible to every user but only the server key may change them."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from agents.tools import REGISTRY
from agents.tools.custom import SourceError, parse_source
from memory.models import NotFound
from memory.tools import ToolData
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import (
    ToolIn,
    ToolUpdate,
    builtin_tool_id,
    custom_tool_json,
    tool_json,
)
from voice_gateway.routes.agent_state import agent_out, agent_tools_json
from voice_gateway.routes.http import paginate, parse_body, query_choice
from voice_gateway.tool_isolation import refuse_if_unisolated

_BUILTIN_IDS = {builtin_tool_id(t.name): t.name for t in REGISTRY.all()}


async def tool_names_of(request: Request, ids: list[str], user_id: str | None) -> list[str]:
    """The names of the tools with these ids (built-in or custom) that an agent of `user_id`
    may use (Letta's `tool_ids`); an unknown id is a 404 naming it."""
    gw = gateway_of(request)
    names = []
    for tool_id in ids:
        name = _BUILTIN_IDS.get(tool_id)
        if name is None:
            tool = await gw.memory.tools.get(tool_id, user_id, scoped=True)
            name = tool.name
        names.append(name)
    return names


def _check_body(body: ToolUpdate) -> None:
    if body.source_type not in (None, "python"):
        raise ApiError(422, f"source_type '{body.source_type}' is not supported; use 'python'")
    if body.pip_requirements or body.npm_requirements:
        raise ApiError(422, "pip/npm requirements are not supported: tools run offline")


def _parse(source: str, body: ToolUpdate, description: str | None = None) -> dict[str, Any]:
    try:
        parsed = parse_source(
            source,
            json_schema=body.json_schema,
            args_json_schema=body.args_json_schema,
            description=body.description or description,
        )
    except SourceError as exc:
        named = (body.json_schema or {}).get("name")
        if body.source_code is not None and isinstance(named, str) and f"'{named}'" in str(exc):
            # Letta's answer to a json_schema naming another function than the source's
            raise ApiError(400, f"json_schema.name '{named}' does not match: {exc}") from exc
        raise ApiError(422, str(exc)) from exc
    schema = parsed.json_schema
    return {"name": parsed.name, "json_schema": schema, "description": schema["description"]}


async def list_tools(request: Request) -> JSONResponse:
    """Built-in tools (with their voice_safe flag) and your custom tools (name, names, search,
    tool_types, exclude_tool_types, limit, after, before)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    out = [tool_json(t) for t in REGISTRY.all()]
    out += [custom_tool_json(t) for t in await gw.memory.tools.page(p.user_id, limit=10_000)]
    q = request.query_params

    def listed(key: str) -> set[str]:
        return {v for raw in q.getlist(key) for v in raw.split(",") if v}

    names, types, skip = (
        listed("names") | listed("name"),
        listed("tool_types"),
        listed("exclude_tool_types"),
    )
    search = (q.get("search") or "").lower()
    out = [
        t
        for t in out
        if (not names or t["name"] in names)
        and (not types or t["tool_type"] in types)
        and t["tool_type"] not in skip
        and search in t["name"].lower()
    ]
    if query_choice(request, "order", ("asc", "desc"), "asc") == "desc":
        out.reverse()
    return JSONResponse(paginate(request, out))


async def _save(request: Request, create_only: bool) -> JSONResponse:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    body = await parse_body(request, ToolIn)
    _check_body(body)
    refuse_if_unisolated(gw)
    fields = _parse(body.source_code, body)
    voice = body.voice_flag()
    extra: dict[str, Any] = {"voice_safe": voice} if voice is not None else {}
    if body.return_char_limit is not None:
        extra["return_char_limit"] = body.return_char_limit
    tool, created = await gw.memory.tools.upsert(
        p.user_id,
        fields.pop("name"),
        create_only=create_only,
        source_code=body.source_code,
        source_type="python",
        **({"tags": list(body.tags or [])} if "tags" in body.model_fields_set else {}),
        **fields,
        **extra,
    )
    return JSONResponse(custom_tool_json(tool), status_code=201 if created else 200)


async def create_tool(request: Request) -> JSONResponse:
    """Create a custom tool from Python `source_code` (the schema is read from the function's
    signature and docstring; `json_schema` overrides it). 409 if the name is taken."""
    return await _save(request, create_only=True)


async def upsert_tool(request: Request) -> JSONResponse:
    """Create or replace a custom tool by its function name."""
    return await _save(request, create_only=False)


async def _custom(request: Request, *, write: bool) -> ToolData:
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    tool_id = request.path_params["tool_id"]
    if tool_id in _BUILTIN_IDS and write:
        raise ApiError(403, f"'{_BUILTIN_IDS[tool_id]}' is a built-in tool and cannot be changed")
    tool: ToolData = await gw.memory.tools.get(tool_id, p.user_id, scoped=p.scoped)
    if write and p.scoped and tool.user_id != p.user_id:
        raise ApiError(403, "this tool belongs to the server; only the server key can change it")
    return tool


async def get_tool(request: Request) -> JSONResponse:
    """Retrieve a tool (built-in or custom) by id."""
    name = _BUILTIN_IDS.get(request.path_params["tool_id"])
    tool = REGISTRY.get(name) if name else None
    if tool is not None:
        await gateway_of(request).auth.principal(request)
        return JSONResponse(tool_json(tool))
    return JSONResponse(custom_tool_json(await _custom(request, write=False)))


async def modify_tool(request: Request) -> JSONResponse:
    """Update a custom tool: source_code (schema re-read), json_schema, description, tags,
    voice_safe. A new function name renames the tool in the agents that use it."""
    gw = gateway_of(request)
    tool = await _custom(request, write=True)
    body = await parse_body(request, ToolUpdate)
    _check_body(body)
    fields: dict[str, Any] = {}
    if body.source_code is not None:
        refuse_if_unisolated(gw)
    if body.source_code is not None or body.json_schema or body.args_json_schema:
        fields = _parse(body.source_code or tool.source_code or "", body)
        fields["source_code"] = body.source_code or tool.source_code
    elif body.description is not None:
        fields["description"] = body.description
        fields["json_schema"] = {**tool.json_schema, "description": body.description}
    if body.tags is not None:
        fields["tags"] = list(body.tags)
    if body.voice_flag() is not None:
        fields["voice_safe"] = body.voice_flag()
    if "return_char_limit" in body.model_fields_set:  # null: back to the server's limit
        fields["return_char_limit"] = body.return_char_limit
    return JSONResponse(custom_tool_json(await gw.memory.tools.update(tool.id, **fields)))


async def delete_tool(request: Request) -> JSONResponse:
    """Delete a custom tool (it is detached from the agents that use it)."""
    tool = await _custom(request, write=True)
    return JSONResponse(custom_tool_json(await gateway_of(request).memory.tools.delete(tool.id)))


async def list_agent_tools(request: Request) -> JSONResponse:
    """The agent's tools."""
    agent = await gateway_of(request).auth.agent(request, request.path_params["agent_id"])
    return JSONResponse(paginate(request, await agent_tools_json(request, agent)))


async def _set_attached(request: Request, attached: bool) -> JSONResponse:
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    tool_id = request.path_params["tool_id"]
    name = _BUILTIN_IDS.get(tool_id)
    if name is None:
        tool = await _custom(request, write=False)
        if tool.user_id not in (agent.user_id, None):  # the agent's owner could not run it
            raise NotFound("tool", tool_id)
        name = tool.name
    await gw.memory.tools.set_attached(agent.id, name, attached)
    return JSONResponse(await agent_out(request, await gw.memory.agents.get(agent.id)))


async def attach_tool(request: Request) -> JSONResponse:
    """Attach a tool to an agent (returns the agent)."""
    return await _set_attached(request, True)


async def detach_tool(request: Request) -> JSONResponse:
    """Detach a tool from an agent (returns the agent)."""
    return await _set_attached(request, False)


def routes() -> list[BaseRoute]:
    t, a = "/v1/tools", "/v1/agents/{agent_id}/tools"
    return [
        Route(t, list_tools, methods=["GET"]),
        Route(f"{t}/", list_tools, methods=["GET"]),
        Route(t, create_tool, methods=["POST"]),
        Route(f"{t}/", create_tool, methods=["POST"]),
        Route(t, upsert_tool, methods=["PUT"]),
        Route(f"{t}/", upsert_tool, methods=["PUT"]),
        Route(f"{t}/{{tool_id}}", get_tool, methods=["GET"]),
        Route(f"{t}/{{tool_id}}", modify_tool, methods=["PATCH"]),
        Route(f"{t}/{{tool_id}}", delete_tool, methods=["DELETE"]),
        Route(a, list_agent_tools, methods=["GET"]),
        Route(f"{a}/", list_agent_tools, methods=["GET"]),
        Route(f"{a}/attach/{{tool_id}}", attach_tool, methods=["PATCH"]),
        Route(f"{a}/detach/{{tool_id}}", detach_tool, methods=["PATCH"]),
    ]
