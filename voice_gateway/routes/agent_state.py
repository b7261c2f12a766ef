"""An agent as Letta's AgentState, for every route that answers with one (agents, tools,
blocks, folders, tool rules): one module they all import, importing none of them back."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from agents.tools import REGISTRY
from memory.ids import default_conversation_id
from memory.models import AgentData
from memory.open_files import OpenFiles, max_open, window_chars
from voice_gateway.gateway import gateway_of
from voice_gateway.protocol.letta import agent_json, custom_tool_json, iso, tool_json
from voice_gateway.protocol.letta_groups import SLEEPTIME_OF, group_json, sleeptime_agent_id
from voice_gateway.protocol.letta_sources import folder_json


async def agent_tools_json(request: Request, agent: AgentData) -> list[dict[str, Any]]:
    """The agent's tools as Letta Tools, in the agent's order."""
    unknown = [n for n in agent.tool_names if REGISTRY.get(n) is None]
    rows = await gateway_of(request).memory.tools.by_names(agent.user_id, unknown)
    custom = {t.name: custom_tool_json(t) for t in rows}
    out = []
    for name in agent.tool_names:
        builtin = REGISTRY.get(name)
        if builtin is not None or name in custom:
            out.append(tool_json(builtin) if builtin is not None else custom[name])
    return out


async def file_blocks(request: Request, agent: AgentData) -> list[dict[str, Any]]:
    """Letta's `memory.file_blocks`: every file of the agent's folders, open (its window of
    lines) or closed (no text)."""
    blocks = {b.file_id: b for b in agent.blocks if b.scope == "file"}
    out = []
    for f in await OpenFiles(gateway_of(request).memory.db).listing(agent.id):
        block = blocks.get(f.file_id)
        out.append(
            {
                "id": block.id if block is not None else f.id,
                "label": f"{f.folder_name}/{f.file_name}",
                "value": f.visible_content or "",
                "limit": window_chars(agent.metadata),
                "read_only": True,
                "file_id": f.file_id,
                "source_id": f.folder_id,
                "folder_id": f.folder_id,
                "is_open": f.is_open,
                "last_accessed_at": iso(f.last_accessed_at) if f.last_accessed_at else None,
                "description": None,
                "metadata": {},
            }
        )
    return out


async def agent_out(request: Request, agent: AgentData) -> dict[str, Any]:
    """The agent as Letta's AgentState; `message_ids`: its default conversation's context;
    `sources`: the folders attached to it; `multi_agent_group`: its sleeptime group."""
    gw = gateway_of(request)
    tools = await agent_tools_json(request, agent)
    ids = await gw.memory.conversations.in_context_ids(default_conversation_id(agent.id))
    out = agent_json(agent, tools, gw.settings.context_token_budget, ids)
    out["sources"] = [folder_json(f) for f in await gw.memory.folders.agent_folders(agent.id)]
    out["memory"]["file_blocks"] = await file_blocks(request, agent)
    out["max_files_open"] = max_open(agent.metadata)
    out["per_file_view_window_char_limit"] = window_chars(agent.metadata)
    out["enable_sleeptime"] = False
    out["multi_agent_group"] = None
    if agent.metadata.get(SLEEPTIME_OF) and agent.id == sleeptime_agent_id(
        str(agent.metadata[SLEEPTIME_OF])
    ):
        out["agent_type"] = "sleeptime_agent"
    else:
        helper_id = sleeptime_agent_id(agent.id)
        if await gw.memory.agents.exists(helper_id):
            helper = await gw.memory.agents.get(helper_id)
            if helper.metadata.get(SLEEPTIME_OF) == agent.id:
                out["enable_sleeptime"] = True
                out["multi_agent_group"] = group_json(agent, helper)
    return out
