"""Write imported agents (an agent file, docs/rest_api.md "Agent files") in ONE transaction:
the agents, their blocks, default archives and conversations, their custom tools and their
message history. Everything is checked before this runs; a failure here (a tool name taken by
a concurrent writer, a database error) rolls the whole import back: nothing half-imported."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from memory.agents import AGENT_FIELDS, own_archive
from memory.blocks import BlockStore
from memory.db import Database
from memory.models import BlockSpec, MessageData
from memory.orm import Agent, Conversation, Message, Tool, default_conversation_id, new_id, utcnow

TOOL_FIELDS = ("description", "json_schema", "source_code", "tags", "return_char_limit")


@dataclass
class ToolPlan:
    """A custom tool of the file, its source already parsed and checked."""

    name: str
    description: str | None
    json_schema: dict[str, Any]
    source_code: str
    tags: list[str] = field(default_factory=list)
    return_char_limit: int | None = None


@dataclass
class AgentPlan:
    fields: dict[str, Any]  # AGENT_FIELDS: name, system, model, embedding, tool_names, ...
    blocks: list[BlockSpec]
    messages: list[MessageData]  # agent_id / conversation_id are set here; in order


async def import_agents(
    db: Database,
    user_id: str | None,
    agents: Sequence[AgentPlan],
    tools: Sequence[ToolPlan],
    *,
    override_tools: bool,
) -> list[str]:
    """Create the agents (ids in file order). A custom tool of a name the user already has is
    replaced by the file's (`override_tools`) or kept as it is."""
    ids = [new_id("agent") for _ in agents]
    async with db.write() as s:
        for tool in tools:
            owned = Tool.user_id.is_(None) if user_id is None else Tool.user_id == user_id
            row = await s.scalar(select(Tool).where(Tool.name == tool.name, owned))
            if row is None:
                row = Tool(id=new_id("tool"), user_id=user_id, name=tool.name, created_at=utcnow())
                s.add(row)
            elif not override_tools:
                continue
            for key in TOOL_FIELDS:
                setattr(row, key, getattr(tool, key))
            row.source_type = "python"
        for agent_id, plan in zip(ids, agents, strict=True):
            values = {k: v for k, v in plan.fields.items() if k in AGENT_FIELDS}
            values["metadata_"] = values.pop("metadata", None) or {}
            s.add(Agent(id=agent_id, user_id=user_id, **values))
            await s.flush()
            s.add(own_archive(agent_id, user_id, str(values.get("name") or "agent"), values))
            BlockStore.add_specs(s, agent_id, plan.blocks)
            conv_id = default_conversation_id(agent_id)
            s.add(
                Conversation(
                    id=conv_id,
                    agent_id=agent_id,
                    user_id=user_id,
                    source="text",
                    messages_version=1 if plan.messages else 0,
                )
            )
            await s.flush()
            for m in plan.messages:  # inserted in the order added: seq follows the file's
                m.agent_id, m.conversation_id = agent_id, conv_id
                m.created_at = m.created_at or utcnow()
                s.add(Message(**m.model_dump(exclude={"seq"})))
            await s.flush()
    return ids
