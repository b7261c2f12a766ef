"""Letta's sleeptime group of an agent, as ids derived from the agent's own: the sleeptime
agent is `agent-<uuid5 of the primary's id>`, the group `group-<the primary's uuid>`. The group
needs no row of its own: the sleeptime agent's row (its metadata names its primary and the
frequency) is the group."""

from __future__ import annotations

import uuid
from typing import Any

from memory.models import AgentData

_NS = uuid.UUID("0b6c1c55-3f0e-4d8e-a1a7-5d2e7f9c4b21")
SLEEPTIME_OF = "sleeptime_of"  # sleeptime agent metadata: its primary agent's id
FREQUENCY = "sleeptime_agent_frequency"
DEFAULT_FREQUENCY = 5


def sleeptime_agent_id(primary_id: str) -> str:
    return f"agent-{uuid.uuid5(_NS, primary_id)}"


def group_id(primary_id: str) -> str:
    return "group-" + primary_id.removeprefix("agent-")


def primary_of_group(gid: str) -> str | None:
    """The primary agent's id of a group id (None: not a group id of ours)."""
    if not gid.startswith("group-"):
        return None
    try:
        return f"agent-{uuid.UUID(gid.removeprefix('group-'))}"
    except ValueError:
        return None


def group_json(primary: AgentData, sleeptime: AgentData) -> dict[str, Any]:
    """Letta's Group (manager_type "sleeptime") of `primary` and its sleeptime agent."""
    return {
        "id": group_id(primary.id),
        "manager_type": "sleeptime",
        "agent_ids": [sleeptime.id],
        "description": f"sleeptime group of {primary.name}",
        "manager_agent_id": primary.id,
        "sleeptime_agent_frequency": sleeptime.metadata.get(FREQUENCY, DEFAULT_FREQUENCY),
        "shared_block_ids": [b.id for b in primary.blocks if b.scope != "file"],
        "turns_counter": None,
        "last_processed_message_id": None,
        "hidden": False,
        "project_id": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "termination_token": None,
        "max_turns": None,
        "max_message_buffer_length": None,
        "min_message_buffer_length": None,
    }
