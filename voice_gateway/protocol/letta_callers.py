"""Letta 1.x wire shapes of conversations, shared blocks and identities (callers): request
bodies and serializers, as letta-client 1.12.1 parses them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from memory.models import BlockData, BlockSpec, ConversationData, IdentityData
from voice_gateway.protocol.letta import MessagesRequest, _Body, block_json, iso


class ConversationCreate(_Body):
    """POST /v1/conversations/ (agent_id in the query). `caller`: our extension, the caller
    key whose conversation this is (their identity and blocks are made on first contact)."""

    summary: str | None = Field(None, max_length=100_000)
    model: str | None = Field(None, max_length=200)
    description: str | None = None
    hidden: bool = False
    caller: str | None = None


class ConversationUpdate(_Body):
    summary: str | None = Field(None, max_length=100_000)
    model: str | None = Field(None, max_length=200)
    archived: bool | None = None


class ConversationMessages(MessagesRequest):
    """POST /v1/conversations/{id}/messages: streams unless `streaming` is false (Letta)."""

    streaming: bool = True
    agent_id: str | None = Field(None, max_length=64)


class AgentNamed(_Body):
    """Bodies of compact, recompile and stream: the agent of the `default` conversation."""

    agent_id: str | None = Field(None, max_length=64)
    run_id: str | None = Field(None, max_length=64)
    starting_after: int | None = Field(None, ge=0)


class BlockCreate(_Body):
    label: str = Field(min_length=1, max_length=100)
    value: str = ""
    limit: int | None = Field(None, ge=1, le=1_000_000)
    description: str | None = None
    read_only: bool = False

    def spec(self) -> BlockSpec:
        return BlockSpec(
            label=self.label,
            value=self.value,
            limit=self.limit or max(5000, len(self.value)),
            description=self.description,
            read_only=self.read_only,
            scope="agent",
        )


class SharedBlockUpdate(_Body):
    value: str | None = None
    limit: int | None = Field(None, ge=1, le=1_000_000)
    description: str | None = None
    read_only: bool | None = None
    version: int | None = None


class IdentityCreate(_Body):
    identifier_key: str
    name: str | None = Field(None, max_length=200)
    identity_type: Literal["user", "org", "other"] = "user"
    properties: list[dict[str, Any]] = Field(default_factory=list)
    agent_ids: list[str] = Field(default_factory=list)


class IdentityUpdate(_Body):
    identifier_key: str | None = None
    name: str | None = Field(None, max_length=200)
    identity_type: Literal["user", "org", "other"] | None = None
    properties: list[dict[str, Any]] | None = None
    agent_ids: list[str] | None = None


def conversation_json(c: ConversationData, in_context: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": c.id,
        "agent_id": c.agent_id,
        "archived": c.archived,
        "archived_at": iso(c.updated_at) if c.archived else None,
        "context_window_limit": None,
        "created_at": iso(c.created_at),
        "created_by_id": None,
        "description": None,
        "in_context_message_ids": in_context,
        "last_message_at": iso(c.last_active_at),
        "last_updated_by_id": None,
        "model": c.model,
        "model_settings": None,
        "summary": c.summary,
        "updated_at": iso(c.updated_at),
        "identity_id": c.identity_id,  # ours: the caller whose conversation this is
        "source": c.source,
    }


def shared_block_json(b: BlockData) -> dict[str, Any]:
    """A block as Letta's BlockResponse, plus where it lives (ours)."""
    return {
        **block_json(b),
        "is_template": False,
        "hidden": None,
        "tags": [],
        "project_id": None,
        "agent_id": b.agent_id,
        "identity_id": b.identity_id,
        "scope": b.scope,
    }


def identity_json(i: IdentityData, agent_ids: list[str], block_ids: list[str]) -> dict[str, Any]:
    return {
        "id": i.id,
        "identifier_key": i.identifier_key,
        "name": i.name,
        "identity_type": i.identity_type,
        "project_id": None,
        "agent_ids": agent_ids,
        "block_ids": block_ids,
        "properties": i.properties,
        "created_at": iso(i.created_at),
        "updated_at": iso(i.updated_at),
    }
