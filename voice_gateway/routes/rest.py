"""Letta-compatible text REST API: health, agents (messages, memory and tools in sibling
modules), and the OpenAPI document."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agents.tools import BASE_TOOLS, REGISTRY
from memory.embeddings import LOCAL_HANDLE, validate_handle
from memory.ids import default_conversation_id, new_id
from memory.models import BlockSpec, MessageData
from memory.shared_blocks import SharedBlocks
from voice_gateway import __version__
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import (
    FILE_LIMITS,
    AgentCreate,
    AgentUpdate,
    with_file_limits,
)
from voice_gateway.routes import (
    conversation_access,
    rest_agent_files,
    rest_generate,
    rest_groups,
    rest_mcp,
    rest_memory,
    rest_messages,
    rest_models,
    rest_tool_actions,
    rest_tool_rules,
    rest_tools,
)
from voice_gateway.routes.agent_state import agent_out
from voice_gateway.routes.http import parse_body, query_choice, query_int
from voice_gateway.routes.openapi import openapi_document

DEFAULT_PERSONA = "I am a friendly, concise assistant with a long-term memory."
CLEARABLE = {
    "description",
    "greeting",
    "context_window_limit",
    "call_tools",
    "voicemail_message",
}  # PATCH may set these to null


async def health(request: Request) -> JSONResponse:
    """Service health (liveness of the API). Public, as in Letta: no key needed, and nothing
    in it but the status and the version."""
    return JSONResponse({"status": "ok", "version": __version__})


async def _check_handles(
    request: Request,
    model: str | None,
    embedding: str | None,
    tools: list[str] | None,
    user_id: str | None,
) -> None:
    try:
        if model is not None:
            gateway_of(request).llms.validate(model)
        if embedding is not None:
            validate_handle(embedding)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc
    if tools:
        known = set(REGISTRY.names()) | await gateway_of(request).memory.tools.names(user_id)
        unknown = sorted(set(tools) - known)
        if unknown:
            raise ApiError(
                422, f"unknown tools: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )


async def create_agent(request: Request) -> JSONResponse:
    """Create an agent with memory blocks, model and tools."""
    gw = gateway_of(request)
    principal = await gw.auth.principal(request)
    body = await parse_body(request, AgentCreate)
    model = body.model or gw.default_model()
    # none given: the operator's default (VG_DEFAULT_EMBEDDING) if they chose one, else none
    # (Letta's embedding_config null; memory/embeddings.py embeds its archive locally)
    chosen = gw.settings.default_embedding
    embedding = body.embedding or (chosen if chosen != LOCAL_HANDLE else "")
    by_id = await rest_tools.tool_names_of(request, body.tool_ids or [], principal.user_id)
    base = BASE_TOOLS if body.include_base_tools else []
    if body.enable_sleeptime:  # its sleeptime agent edits memory instead (Letta's)
        base = [t for t in base if t not in rest_groups.MEMORY_EDIT_TOOLS]
    tools = list(dict.fromkeys([*base, *(body.tools or []), *by_id]))
    await _check_handles(request, model, embedding or None, tools, principal.user_id)
    shared = SharedBlocks(gw.memory.db, gw.memory.blocks)
    attach = [  # Letta's block_ids: existing blocks, attached (unknown / not yours: 404)
        await shared.get(block_id, principal.user_id, scoped=principal.scoped)
        for block_id in dict.fromkeys(body.block_ids or [])
    ]
    folders = [  # Letta's source_ids: folders to attach (unknown / not yours: 404)
        await gw.memory.folders.get(folder_id, principal.user_id, scoped=principal.scoped)
        for folder_id in dict.fromkeys(body.source_ids or [])
    ]
    blocks = (
        [b.spec() for b in body.memory_blocks]
        if body.memory_blocks is not None
        else [BlockSpec(label="persona", value=DEFAULT_PERSONA), BlockSpec(label="human", value="")]
    )
    if body.memory_blocks is None:  # a default block gives way to an attached one
        blocks = [b for b in blocks if b.label not in {a.label for a in attach}]
    rules = await rest_tool_rules.checked_rules(request, body.tool_rules or [], principal.user_id)
    labels = [b.label for b in blocks]
    if len(set(labels)) != len(labels):
        raise ApiError(422, "memory block labels must be unique")
    clash = sorted({a.label for a in attach} & set(labels))
    if clash or len({a.label for a in attach}) != len(attach):
        raise ApiError(409, f"two blocks labelled {', '.join(clash) or 'alike'} among block_ids")
    agent = await gw.memory.agents.create(
        user_id=principal.user_id,
        blocks=blocks,
        name=body.name or "agent",
        system=body.system or "",
        description=body.description,
        model=model,
        embedding=embedding,
        tool_names=tools,
        tool_rules=rules,
        tags=body.tags,
        metadata=with_file_limits(body.metadata, body.model_dump()),
        greeting=body.greeting,
        voice_default=body.voice_default,
        context_window=body.context_window_limit,
        transfer_targets=body.transfer_targets,
        call_tools=body.call_tools,
        voicemail_message=body.voicemail_message,
    )
    for block in attach:
        await shared.attach(block, agent.id)
    for folder in folders:  # the agent gets the file tools with its first folder
        await gw.memory.folders.set_attached(agent.id, folder.id, True)
    if attach or folders:
        agent = await gw.memory.agents.get(agent.id)
    if body.enable_sleeptime:
        await rest_groups.enable(gw, agent)
    default = default_conversation_id(agent.id)
    await conversation_access.system_message(gw, agent.id, default, None)
    if body.initial_message_sequence:  # Letta's: the agent's context starts with these
        await gw.memory.messages.append(
            [
                MessageData(
                    id=new_id("message"),
                    agent_id=agent.id,
                    role=m.role,
                    content=m.text(),
                    otid=m.otid,
                    conversation_id=default_conversation_id(agent.id),
                )
                for m in body.initial_message_sequence
            ]
        )
    return JSONResponse(await agent_out(request, agent), status_code=201)


async def list_agents(request: Request) -> JSONResponse:
    """List your agents (limit, after, before, order, name, tags)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    q = request.query_params
    agents = await gw.memory.agents.page(
        user_id=p.user_id,
        scoped=p.scoped,
        name=q.get("name"),
        tags=q.getlist("tags") or None,
        limit=query_int(request, "limit", 50),
        after=q.get("after"),
        before=q.get("before"),
        order=query_choice(request, "order", ("asc", "desc"), "asc"),
    )
    return JSONResponse([await agent_out(request, a) for a in agents])


async def get_agent(request: Request) -> JSONResponse:
    """Retrieve an agent."""
    agent = await gateway_of(request).auth.agent(request, request.path_params["agent_id"])
    return JSONResponse(await agent_out(request, agent))


async def update_agent(request: Request) -> JSONResponse:
    """Update an agent's name, system prompt, model, tools, tags, greeting..."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    body = await parse_body(request, AgentUpdate)
    if body.tool_ids is not None:  # Letta's: the agent's tools are these (with `tools`)
        by_id = await rest_tools.tool_names_of(request, body.tool_ids, agent.user_id)
        body.tools = list(dict.fromkeys([*(body.tools or []), *by_id]))
    await _check_handles(request, body.model, body.embedding, body.tools, agent.user_id)
    # null clears what may be empty; for the rest it means "unchanged" (a null name was a 500,
    # found by tests/fuzz/test_schemathesis.py)
    fields = {
        k: v
        for k, v in body.model_dump(exclude_unset=True).items()
        if v is not None or k in CLEARABLE
    }
    fields.pop("tool_ids", None)
    sleeptime = fields.pop("enable_sleeptime", None)
    if body.tools is not None:
        fields.pop("tools", None)
        fields["tool_names"] = body.tools
    if body.tool_rules is not None:
        fields["tool_rules"] = await rest_tool_rules.checked_rules(
            request, body.tool_rules, agent.user_id
        )
    if "context_window_limit" in fields:
        fields["context_window"] = fields.pop("context_window_limit")
    limits = {k: fields.pop(k) for k in FILE_LIMITS if k in fields}
    if limits:
        fields["metadata"] = with_file_limits(fields.get("metadata") or agent.metadata, limits)
    updated = await gw.memory.agents.update(agent.id, **fields)
    if sleeptime is True:
        await rest_groups.enable(gw, updated)
    elif sleeptime is False:
        await rest_groups.disable(gw, agent.id)
    gw.loop.prompts.forget(agent.id)
    return JSONResponse(await agent_out(request, updated))


async def delete_agent(request: Request) -> Response:
    """Delete an agent and everything it remembers."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    await rest_groups.disable(gw, agent.id)  # its sleeptime agent goes with it (Letta's)
    await gw.memory.agents.delete(agent.id)
    gw.loop.prompts.forget(agent.id)
    return JSONResponse({"detail": f"agent {agent.id} deleted"})


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(openapi_document(list(request.app.routes), __version__))


def routes() -> list[BaseRoute]:
    table: list[BaseRoute] = [
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/health/", health, methods=["GET"]),
        Route("/v1/agents", create_agent, methods=["POST"]),
        Route("/v1/agents/", create_agent, methods=["POST"]),
        Route("/v1/agents", list_agents, methods=["GET"]),
        Route("/v1/agents/", list_agents, methods=["GET"]),
        *rest_agent_files.routes(),
        Route("/v1/agents/{agent_id}", get_agent, methods=["GET"]),
        Route("/v1/agents/{agent_id}", update_agent, methods=["PATCH"]),
        Route("/v1/agents/{agent_id}", delete_agent, methods=["DELETE"]),
        *rest_messages.routes(),
        *rest_generate.routes(),
        *rest_groups.routes(),
        *rest_memory.routes(),
        *rest_tool_actions.routes(),
        *rest_tools.routes(),
        *rest_tool_rules.routes(),
        *rest_mcp.routes(),
        *rest_models.routes(),
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
    ]
    return table
