"""Letta API wire shapes (as parsed by letta-client 1.x): request bodies and serializers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.approvals import Answer, ClientTool
from agents.llm.providers import PROVIDERS
from agents.tools.base_tools import LETTA_TOOL_TYPES
from agents.tools.call_tools import check_call_tools, check_targets
from agents.tools.registry import Tool
from memory.models import AgentData, BlockData, BlockSpec, PassageData
from memory.tools import ToolData

LOCAL_EMBED_DIM = 384
# found by tests/fuzz/test_schemathesis.py: an unbounded int overflowed SQLite's INTEGER (a 500)
MAX_CONTEXT_WINDOW = 10_000_000
VOICEMAIL_MAX = 2000  # characters of an agent's voicemail_message (spoken, about 2 minutes)
_TOOL_NS = uuid.UUID("6f1b5b7e-4d0c-4b8e-9a57-1c0e2f7a9d11")
# AgentState's endpoint types are closed enums in Letta (and letta-client's strict mode). Ours
# that Letta lacks are reported as the nearest: the local MiniLM embedder is a Hugging Face
# sentence-transformers model ("hugging-face"); a model provider Letta has no type for (the
# offline `scripted` demo) as "openai", the wire shape it speaks. `model` / `embedding` and
# the configs' `handle` keep our own handles.
LETTA_LLM_TYPES = {name: spec.endpoint_type for name, spec in PROVIDERS.items()}
# Letta's MessageType: what `include_return_message_types` may name (anything else: a 422)
MessageType = Literal[
    "system_message",
    "user_message",
    "assistant_message",
    "reasoning_message",
    "hidden_reasoning_message",
    "tool_call_message",
    "tool_return_message",
    "approval_request_message",
    "approval_response_message",
    "summary_message",
    "event_message",
]


class _Body(BaseModel):
    """A request body. Strict: JSON types are taken as they are (`true` is no integer, `0` no
    boolean, `"5"` no number); a 422 names the field. Unknown fields are ignored (Letta's)."""

    model_config = ConfigDict(extra="ignore", strict=True)


class BlockIn(_Body):
    label: str = Field(min_length=1, max_length=100)
    value: str = ""
    limit: int | None = Field(None, ge=1, le=1_000_000)
    description: str | None = None
    read_only: bool = False
    sleeptime_editable: bool | None = None

    def spec(self) -> BlockSpec:
        return BlockSpec(
            label=self.label,
            value=self.value,
            limit=self.limit or max(5000, len(self.value)),
            description=self.description,
            read_only=self.read_only,
            sleeptime_editable=bool(self.sleeptime_editable),
        )


class AgentCreate(_Body):
    name: str | None = Field(None, max_length=200)
    system: str | None = None
    description: str | None = None
    model: str | None = None
    embedding: str | None = None
    memory_blocks: list[BlockIn] | None = None
    block_ids: list[str] | None = Field(None, max_length=100)  # existing blocks to attach
    source_ids: list[str] | None = Field(None, max_length=100)  # folders to attach
    tools: list[str] | None = None
    tool_ids: list[str] | None = Field(None, max_length=500)
    include_base_tools: bool = True
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    greeting: str | None = Field(None, max_length=2000)
    voice_default: bool = False
    context_window_limit: int | None = Field(None, ge=500, le=MAX_CONTEXT_WINDOW)
    tool_rules: list[dict[str, Any]] | None = Field(None, max_length=200)
    initial_message_sequence: list[MessageIn] | None = Field(None, max_length=100)
    enable_sleeptime: bool | None = None  # a sleeptime agent sharing its blocks (Letta's)
    max_files_open: int | None = Field(None, ge=1, le=50)  # kept in metadata
    per_file_view_window_char_limit: int | None = Field(None, ge=1, le=1_000_000)
    transfer_targets: dict[str, str] = Field(default_factory=dict)  # call control (ours)
    call_tools: list[str] | None = None
    voicemail_message: str | None = Field(None, min_length=1, max_length=VOICEMAIL_MAX)

    @field_validator("transfer_targets")
    @classmethod
    def _targets(cls, v: dict[str, str]) -> dict[str, str]:
        return check_targets(v)

    @field_validator("call_tools")
    @classmethod
    def _call_tools(cls, v: list[str] | None) -> list[str] | None:
        return check_call_tools(v)

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_names(cls, v: Any) -> Any:
        return (
            [t.get("name") if isinstance(t, dict) else t for t in v] if isinstance(v, list) else v
        )


class AgentUpdate(_Body):
    name: str | None = Field(None, max_length=200)
    system: str | None = None
    description: str | None = None
    model: str | None = None
    embedding: str | None = None
    tools: list[str] | None = None
    tool_ids: list[str] | None = Field(None, max_length=500)
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    greeting: str | None = Field(None, max_length=2000)
    voice_default: bool | None = None
    context_window_limit: int | None = Field(None, ge=500, le=MAX_CONTEXT_WINDOW)
    tool_rules: list[dict[str, Any]] | None = Field(None, max_length=200)
    enable_sleeptime: bool | None = None
    max_files_open: int | None = Field(None, ge=1, le=50)  # kept in metadata
    per_file_view_window_char_limit: int | None = Field(None, ge=1, le=1_000_000)
    transfer_targets: dict[str, str] | None = None
    call_tools: list[str] | None = None
    voicemail_message: str | None = Field(None, min_length=1, max_length=VOICEMAIL_MAX)

    @field_validator("transfer_targets")
    @classmethod
    def _targets(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        return None if v is None else check_targets(v)

    @field_validator("call_tools")
    @classmethod
    def _call_tools(cls, v: list[str] | None) -> list[str] | None:
        return check_call_tools(v)


FILE_LIMITS = ("max_files_open", "per_file_view_window_char_limit")


def with_file_limits(metadata: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The agent's metadata with the open-file limits given (memory/open_files.py reads them)."""
    return {**metadata, **{k: given[k] for k in FILE_LIMITS if given.get(k) is not None}}


class AnswerIn(_Body):
    """One entry of an approval message's `approvals`: Letta's ApprovalReturn or ToolReturn."""

    type: Literal["approval", "tool"] = "approval"
    tool_call_id: str = Field(min_length=1, max_length=128)
    approve: bool | None = None
    reason: str | None = Field(None, max_length=2000)
    tool_return: str | list[dict[str, Any]] = ""
    status: Literal["success", "error"] = "success"

    def answer(self) -> Answer:
        if self.type == "tool":
            text = self.tool_return
            if not isinstance(text, str):
                text = "".join(str(p.get("text", "")) for p in text if isinstance(p, dict))
            return Answer(self.tool_call_id, "tool", tool_return=text, status=self.status)
        return Answer(self.tool_call_id, approve=bool(self.approve), reason=self.reason)


class ClientToolIn(_Body):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    description: str | None = Field(None, max_length=10_000)
    parameters: dict[str, Any] | None = None

    def spec(self) -> ClientTool:
        params = self.parameters or {}
        return ClientTool(
            self.name,
            self.description or "",
            {
                "type": "object",
                "properties": dict(params.get("properties") or {}),
                "required": list(params.get("required") or []),
            },
        )


class MessageIn(_Body):
    role: Literal["user", "system", "assistant"] = "user"  # Letta's MessageCreate roles
    content: str | list[dict[str, Any]] = ""
    otid: str | None = Field(None, max_length=64)
    # Letta's ApprovalCreate (`type: "approval"`): `approvals`, or the older single decision
    type: Literal["message", "approval"] | None = None
    approvals: list[AnswerIn] | None = Field(None, max_length=100)
    approve: bool | None = None
    approval_request_id: str | None = Field(None, max_length=128)
    reason: str | None = Field(None, max_length=2000)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(
            str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text"
        )


class MessagesRequest(_Body):
    messages: list[MessageIn] | None = None
    input: str | list[dict[str, Any]] | None = None
    streaming: bool = False
    stream_tokens: bool = False
    max_steps: int | None = Field(None, ge=1, le=50)
    conversation_id: str | None = Field(None, max_length=64)
    include_return_message_types: list[MessageType] | None = None
    client_tools: list[ClientToolIn] | None = Field(None, max_length=100)
    # Letta's: a send_message call listed as the assistant_message it says (default), or as
    # the tool call and tool return it is
    use_assistant_message: bool = True

    @model_validator(mode="after")
    def _one_input(self) -> MessagesRequest:
        if self.messages and self.input is not None:
            raise ValueError("give either `messages` or `input`, not both")
        return self

    def answers(self) -> list[Answer] | None:
        """The approval message's answers (None: no approval message). The older single
        decision answers every waiting call (`tool_call_id` "*")."""
        given = [m for m in self.messages or [] if m.type == "approval"]
        if not given:
            return None
        m = given[-1]
        if m.approvals is not None:
            return [a.answer() for a in m.approvals]
        return [Answer("*", approve=bool(m.approve), reason=m.reason)]

    def otid(self) -> str | None:
        users = [m for m in self.messages or [] if m.role in ("user", "system")]
        return users[-1].otid if users else None

    def wants(self, message: dict[str, Any]) -> bool:
        kinds = self.include_return_message_types
        return kinds is None or message.get("message_type") in kinds

    def user_text(self) -> str | None:
        if self.messages:
            users = [m for m in self.messages if m.role in ("user", "system")]
            text = users[-1].text() if users else ""
        elif isinstance(self.input, str):
            text = self.input
        elif isinstance(self.input, list):
            text = MessageIn(content=self.input).text()
        else:
            text = ""
        return text.strip() or None


class BlockUpdate(_Body):
    label: str | None = Field(None, min_length=1, max_length=100)  # rename the block
    value: str | None = None
    limit: int | None = Field(None, ge=1, le=1_000_000)
    description: str | None = None
    read_only: bool | None = None
    version: int | None = None


class PassageIn(_Body):
    text: str = Field(min_length=1, max_length=100_000)
    tags: list[str] | None = None
    created_at: datetime | None = Field(None, strict=False)  # JSON has no datetime type

    @field_validator("created_at", mode="before")
    @classmethod
    def _iso_text(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, str):
            raise ValueError("must be an ISO 8601 date-time string")
        return v


class ToolUpdate(_Body):
    """PATCH /v1/tools/{id}: Letta's fields, plus `voice_safe` (also read from metadata_)."""

    source_code: str | None = Field(None, max_length=100_000)
    json_schema: dict[str, Any] | None = None
    args_json_schema: dict[str, Any] | None = None
    description: str | None = Field(None, max_length=10_000)
    tags: list[str] | None = None
    source_type: str | None = None
    voice_safe: bool | None = None
    metadata_: dict[str, Any] | None = None
    pip_requirements: list[Any] | None = None
    npm_requirements: list[Any] | None = None
    return_char_limit: int | None = Field(None, ge=1, le=1_000_000)  # longer returns are cut

    def voice_flag(self) -> bool | None:
        if self.voice_safe is not None:
            return self.voice_safe
        flag = (self.metadata_ or {}).get("voice_safe")
        return flag if isinstance(flag, bool) else None


class ToolIn(ToolUpdate):
    """POST/PUT /v1/tools/: a tool from Python source (Letta's ToolCreate / ToolUpsert)."""

    source_code: str = Field(max_length=100_000)
    tags: list[str] | None = None  # None: a new tool has none, an upserted one keeps its own


def iso(dt: datetime | None) -> str:
    dt = dt or datetime.now(UTC)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).isoformat()


def block_json(b: BlockData) -> dict[str, Any]:
    return {
        "id": b.id,
        "label": b.label,
        "value": b.value,
        "limit": b.limit,
        "description": b.description,
        "read_only": b.read_only,
        "version": b.version,
        "metadata": {"version": b.version, "sleeptime_editable": b.sleeptime_editable},
        "updated_at": iso(b.updated_at) if b.updated_at else None,
    }


def builtin_tool_id(name: str) -> str:
    return f"tool-{uuid.uuid5(_TOOL_NS, name)}"


def tool_json(t: Tool) -> dict[str, Any]:
    """A built-in tool as a Letta Tool."""
    schema = t.schema()["function"]
    return {
        "id": builtin_tool_id(t.name),
        "name": t.name,
        "description": t.description,
        "json_schema": schema,
        "tool_type": LETTA_TOOL_TYPES.get(t.name, "letta_core"),
        "source_type": "python",
        "tags": ["builtin", *(["voice_safe"] if t.voice_safe else []), *t.tags],
        "voice_safe": t.voice_safe,
        "metadata_": {"voice_safe": t.voice_safe, "builtin": True},
    }


def custom_tool_json(t: ToolData) -> dict[str, Any]:
    """A custom (sandboxed Python) tool as a Letta Tool."""
    return {
        "id": t.id,
        "name": t.name,
        "description": t.description,
        "json_schema": t.json_schema,
        "args_json_schema": None,
        "source_code": t.source_code,
        "source_type": t.source_type,
        "tool_type": t.tool_type,
        "tags": t.tags,
        "voice_safe": t.voice_safe,
        "return_char_limit": t.return_char_limit,
        "metadata_": {
            "voice_safe": t.voice_safe,
            "builtin": False,
            **({"mcp_server_id": t.mcp_server_id} if t.mcp_server_id else {}),
        },
        "created_at": iso(t.created_at),
    }


def agent_json(
    a: AgentData,
    tools: list[dict[str, Any]],
    context_window: int,
    message_ids: list[str] | None = None,
) -> dict[str, Any]:
    provider, _, model = a.model.partition("/")
    emb_provider, _, emb_model = a.embedding.partition("/")
    blocks = [block_json(b) for b in a.blocks if b.scope != "file"]  # open files: not core
    return {
        "id": a.id,
        "name": a.name,
        "description": a.description,
        "system": a.system,
        "agent_type": "voice_convo_agent" if a.voice_default else "memgpt_v2_agent",
        "model": a.model,
        "embedding": a.embedding or None,
        "llm_config": {
            "model": model,
            "model_endpoint_type": LETTA_LLM_TYPES.get(provider, "openai"),
            "context_window": a.context_window or context_window,
            "handle": a.model,
        },
        "embedding_config": {
            "embedding_model": emb_model,
            "embedding_endpoint_type": "openai" if emb_provider == "openai" else "hugging-face",
            "embedding_dim": LOCAL_EMBED_DIM if emb_provider == "local" else 1536,
            "handle": a.embedding,
        }
        if a.embedding
        else None,  # created without an embedding model, as Letta allows
        "memory": {"blocks": blocks},
        "blocks": blocks,
        "tools": tools,
        "tags": a.tags,
        "tool_rules": a.tool_rules,
        "sources": [],
        "metadata": a.metadata,
        "greeting": a.greeting,
        "voice_default": a.voice_default,
        "transfer_targets": a.transfer_targets,
        "call_tools": a.call_tools,
        "voicemail_message": a.voicemail_message,
        "message_ids": message_ids,
        "created_at": iso(a.created_at),
        "updated_at": iso(a.updated_at),
    }


def passage_json(p: PassageData) -> dict[str, Any]:
    return {
        "id": p.id,
        "text": p.text,
        "tags": p.tags,
        "created_at": iso(p.created_at),
        "agent_id": p.agent_id,
        "archive_id": p.archive_id,
        "file_id": p.file_id,
        "embedding": None,
    }


def search_result_json(p: PassageData) -> dict[str, Any]:
    return {
        "id": p.id,
        "content": p.text,
        "timestamp": iso(p.created_at),
        "tags": p.tags,
        "score": p.score,
    }
