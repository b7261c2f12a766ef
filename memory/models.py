"""Pydantic schemas of the memory layer (what stores return; wire formats build on these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Actor = Literal["agent", "sleeptime", "user", "system"]
Role = Literal["system", "user", "assistant", "tool"]
Source = Literal["voice", "text", "phone"]


class NotFound(LookupError):
    """A named thing (agent, block, passage, message) does not exist (or is not yours)."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(f"{kind} not found: {key}")
        self.kind, self.key = kind, key


class Conflict(RuntimeError):
    """A write carried a stale version."""


class LimitExceeded(ValueError):
    """A block value is longer than the block's limit."""


class _Model(BaseModel):
    model_config = ConfigDict(from_attributes=True)


BlockScope = Literal["agent", "caller", "file"]


class BlockData(_Model):
    id: str
    agent_id: str | None = None  # None: a standalone (shared) block
    identity_id: str | None = None  # a caller's own copy of a caller-scoped block
    scope: BlockScope = "agent"
    user_id: str | None = None
    label: str
    value: str
    limit: int
    description: str | None = None
    read_only: bool = False
    sleeptime_editable: bool = False
    file_id: str | None = None  # scope "file": the open file this block shows
    version: int = 1
    updated_at: datetime | None = None


class BlockSpec(BaseModel):
    """A block to create with an agent."""

    label: str = Field(min_length=1, max_length=100)
    value: str = ""
    limit: int = Field(5000, ge=1, le=1_000_000)
    description: str | None = None
    read_only: bool = False
    sleeptime_editable: bool = False
    scope: BlockScope | None = None  # None: "caller" for the `human` block, else "agent"

    def resolved_scope(self) -> BlockScope:
        if self.scope is not None:
            return self.scope
        return "caller" if self.label == "human" else "agent"


class BlockChange(_Model):
    version: int
    actor: str
    old_value: str
    new_value: str
    created_at: datetime


class FolderView(BaseModel):
    """A folder attached to an agent as its prompt lists it (Letta's `<directory>`): its
    files by id and name, open or not (open ones are the agent's blocks of scope "file")."""

    id: str
    name: str
    description: str | None = None
    instructions: str | None = None
    files: list[tuple[str, str]] = Field(default_factory=list)  # (file id, file name)


class AgentData(_Model):
    id: str
    user_id: str | None = None
    name: str
    description: str | None = None
    system: str
    model: str
    embedding: str
    tags: list[str] = Field(default_factory=list)
    tool_names: list[str] = Field(default_factory=list)
    tool_rules: list[dict[str, Any]] = Field(default_factory=list)  # agents/tools/rules.py
    greeting: str | None = None
    voice_default: bool = False
    context_window: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    # call control (agents/tools/call_control.py): name -> E.164 number or sip: URI, and the
    # call tools its calls are offered (None: all)
    transfer_targets: dict[str, str] = Field(default_factory=dict)
    call_tools: list[str] | None = None
    # what an outbound call answered by a machine leaves (None: it hangs up without one)
    voicemail_message: str | None = None
    created_at: datetime
    updated_at: datetime
    blocks: list[BlockData] = Field(default_factory=list)
    folders: list[FolderView] = Field(default_factory=list)  # where read with the blocks


class ToolCallData(BaseModel):
    id: str
    name: str
    arguments: str = ""
    waits: bool = False  # of an approval_request step: this call waits for a person or client


class MessageData(_Model):
    id: str
    agent_id: str
    role: Role
    content: str = ""
    # approval_request: an assistant step whose calls wait for a person or a client;
    # approval: the answer to it (not sent to the model: the tool messages carry it)
    # system: the conversation's compiled prompt as Letta lists it first (never in the
    # window: each turn compiles its own from the current blocks)
    kind: Literal["message", "summary", "note", "approval_request", "approval", "system"] = (
        "message"
    )
    seq: int | None = None
    conversation_id: str | None = None
    identity_id: str | None = None
    turn_id: str | None = None
    step_id: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallData] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    tool_status: str | None = None
    truncated: bool = False
    produced: str | None = None
    in_context: bool = True
    created_at: datetime | None = None
    otid: str | None = None


class PassageData(_Model):
    id: str
    agent_id: str | None = None  # None: a shared archive's or a file's passage
    archive_id: str | None = None
    file_id: str | None = None
    text: str
    tags: list[str] = Field(default_factory=list)
    identity_id: str | None = None
    created_at: datetime
    score: float | None = None


class ConversationData(_Model):
    id: str
    agent_id: str
    identity_id: str | None = None
    user_id: str | None = None
    source: str = "text"
    summary: str | None = None
    model: str | None = None
    archived: bool = False
    messages_version: int = 0
    created_at: datetime
    updated_at: datetime
    last_active_at: datetime


class IdentityData(_Model):
    id: str
    user_id: str | None = None
    identifier_key: str
    name: str
    identity_type: str = "user"
    properties: list[Any] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime


class TranscriptEvent(BaseModel):
    """One finished turn (docs/sleeptime.md, stream `vg:transcripts`)."""

    event_id: str
    agent_id: str
    conversation_id: str | None = None
    identity_id: str | None = None  # the caller: sleeptime rewrites that caller's blocks
    turn_id: str
    source: Source
    user_text: str
    agent_text: str
    agent_text_heard: str
    interrupted: bool = False
    started_at: datetime
    ended_at: datetime
    call_ended: bool = False
