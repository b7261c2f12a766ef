"""Ids and the clock: new row ids, the ids of an agent's default conversation and archive, and
the current UTC time. Standard library only, so the agent loop and the voice pipeline use them
without loading the ORM."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def utcnow() -> datetime:
    return datetime.now(UTC)


def default_conversation_id(agent_id: str) -> str:
    """The agent's default conversation (Letta's `default`): what agent routes talk to."""
    return "conv-default-" + agent_id.removeprefix("agent-")


def default_archive_id(agent_id: str) -> str:
    """The agent's own archive (its archival memory; memory/orm/sources.py, migration 0007)."""
    return "archive-" + agent_id.removeprefix("agent-")
