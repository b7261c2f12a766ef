"""Agent files (Letta's `.af`): `GET /v1/agents/{id}/export` and `POST /v1/agents/import`
(multipart field `file`, as letta-client's `agents.export_file` / `agents.import_file`).
docs/rest_api.md "Agent files" is the contract."""

from __future__ import annotations

import json

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agents.tools import REGISTRY
from agents.tools.registry import Tool
from memory.agent_import import import_agents
from memory.blocks import compile_blocks
from memory.ids import default_conversation_id
from memory.models import MessageData
from memory.open_files import OpenFiles
from memory.tools import ToolData
from voice_gateway.agent_files import ImportOptions, Planner
from voice_gateway.errors import ApiError
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.agent_file import AgentFileError, parse_agent_file
from voice_gateway.protocol.agent_file_out import add_sources, agent_file
from voice_gateway.routes.http import query_bool, query_int
from voice_gateway.routes.rest_folders import jobs

PAGE = 1000


async def export_agent(request: Request) -> Response:
    """The agent as an agent file (JSON): blocks, tools (custom ones with source), tool rules
    and the messages of its default conversation (or `conversation_id`'s); `scrub_messages`
    leaves the messages out."""
    gw = gateway_of(request)
    agent = await gw.auth.agent(request, request.path_params["agent_id"])
    query_int(request, "max_steps", 100, hi=100_000)  # accepted (Letta's), not used
    if query_bool(request, "use_legacy_format", False):
        raise ApiError(422, "the legacy single-agent (v1) format is not served; use v2")
    conv_id = request.query_params.get("conversation_id") or default_conversation_id(agent.id)
    await gw.memory.conversations.get(conv_id, agent.id)  # another agent's: 404
    blocks = [b for b in await gw.memory.blocks.all(agent.id) if b.scope != "file"]
    custom = {
        t.name: t
        for t in await gw.memory.tools.by_names(
            agent.user_id, [n for n in agent.tool_names if REGISTRY.get(n) is None]
        )
    }
    tools: list[Tool | ToolData] = []
    for name in agent.tool_names:
        found = REGISTRY.get(name) or custom.get(name)
        if found is not None:
            tools.append(found)
    messages: list[MessageData] = []
    if not query_bool(request, "scrub_messages", False):
        messages = await _conversation(request, agent.id, conv_id)
    system = f"{agent.system}\n\n{compile_blocks(blocks)}"
    body = agent_file(agent, blocks, tools, messages, system, gw.settings.context_token_budget)
    add_sources(
        body,
        await gw.memory.folders.agent_folders(agent.id),
        await gw.memory.files.of_agent(agent.id),
        await OpenFiles(gw.memory.db).listing(agent.id),
    )
    return Response(json.dumps(body, indent=2), media_type="application/json")


async def _conversation(request: Request, agent_id: str, conv_id: str) -> list[MessageData]:
    store = gateway_of(request).memory.messages
    out: list[MessageData] = []
    after = None
    while True:
        page = await store.page(
            agent_id, limit=PAGE, after=after, order="asc", conversation_id=conv_id
        )
        out += [m for m in page if m.kind != "note"]
        if len(page) < PAGE:
            return out
        after = page[-1].id


async def import_agent(request: Request) -> JSONResponse:
    """Create the agent(s) of an uploaded agent file, all or nothing: a malformed or foreign
    file is a 422 naming the first problem, one over VG_MAX_FILE_BYTES a 413."""
    gw = gateway_of(request)
    principal = await gw.auth.principal(request)
    limit = gw.settings.max_file_bytes
    async with request.form(max_files=1, max_fields=30) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(422, "multipart field 'file' (the agent file) is required")
        if upload.size is not None and upload.size > limit:
            raise ApiError(413, f"agent file over the limit of {limit} bytes")
        data = await upload.read(limit + 1)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if len(data) > limit:
        raise ApiError(413, f"agent file over the limit of {limit} bytes")
    opts = ImportOptions.from_form(fields, request.headers.get("x-override-embedding-model"))
    try:
        af = parse_agent_file(data)
    except AgentFileError as exc:
        raise ApiError(422, f"agent file: {exc}") from exc
    planner = Planner(gw, af, opts)
    plans, tools = planner.plan()
    done = await import_agents(
        gw.memory.db,
        principal.user_id,
        plans,
        tools,
        override_tools=opts.override_existing_tools,
        folders=planner.folders,
        files=planner.files,
    )
    worker = jobs(request)
    for folder_id, file_id, text in done.files:  # chunked and embedded again, in the background
        folder = await gw.memory.folders.get(folder_id, None, scoped=False)
        worker.submit(folder, await gw.memory.files.get(file_id), b"", text)
    return JSONResponse({"agent_ids": done.agent_ids})


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/agents/import", import_agent, methods=["POST"]),
        Route("/v1/agents/import/", import_agent, methods=["POST"]),
        Route("/v1/agents/{agent_id}/export", export_agent, methods=["GET"]),
    ]
