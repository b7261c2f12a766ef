"""An agent as Letta's AgentState, for every route that answers with one (the agent routes,
and those that attach tools, folders, blocks or rules to an agent)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from memory.ids import default_conversation_id
from memory.models import AgentData
from voice_gateway.protocol.letta import agent_json
from voice_gateway.routes import rest_tools


async def agent_out(request: Request, agent: AgentData) -> dict[str, Any]:
    """The agent as Letta's AgentState; `message_ids`: its default conversation's context."""
    gw = request.app.state.gw
    tools = await rest_tools.agent_tools_json(request, agent)
    ids = await gw.memory.conversations.in_context_ids(default_conversation_id(agent.id))
    return agent_json(agent, tools, gw.settings.context_token_budget, ids)
