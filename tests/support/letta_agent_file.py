"""What Letta 0.16's importer requires of an agent file (`AgentFileSchema` of its server, v2),
written down as strict pydantic models from the schema's field list: every top-level list is
required, ids are strings, each message has a role of Letta's `MessageRole`, each tool a
`tool_type` of Letta's `ToolType`, configs carry their required fields with Letta's endpoint
types. Our exports are validated against these (tests/integration/test_agent_files.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LLM_ENDPOINT_TYPES = Literal[
    "openai", "anthropic", "google_ai", "google_vertex", "azure", "groq", "ollama", "webui",
    "webui-legacy", "lmstudio", "lmstudio-legacy", "lmstudio-chatcompletions", "llamacpp",
    "koboldcpp", "vllm", "hugging-face", "mistral", "together", "bedrock", "deepseek", "xai",
]  # fmt: skip
EMBEDDING_ENDPOINT_TYPES = Literal[
    "openai", "anthropic", "bedrock", "google_ai", "google_vertex", "azure", "groq", "ollama",
    "webui", "webui-legacy", "lmstudio", "lmstudio-legacy", "llamacpp", "koboldcpp", "vllm",
    "hugging-face", "mistral", "together", "pinecone",
]  # fmt: skip
TOOL_TYPES = Literal[
    "custom", "letta_core", "letta_memory_core", "letta_multi_agent_core",
    "letta_sleeptime_core", "letta_voice_sleeptime_core", "letta_builtin", "letta_files_core",
    "external_composio", "external_langchain", "external_mcp",
]  # fmt: skip


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=False)


class LLMConfig(_Strict):
    model: str
    model_endpoint_type: LLM_ENDPOINT_TYPES
    context_window: int
    handle: str | None = None


class EmbeddingConfig(_Strict):
    embedding_endpoint_type: EMBEDDING_ENDPOINT_TYPES
    embedding_model: str
    embedding_dim: int
    handle: str | None = None


class Function(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"]
    function: Function


class ToolReturn(_Strict):
    tool_call_id: Any = None
    status: Literal["success", "error"]
    func_response: str | None = None
    stdout: list[str] | None = None
    stderr: list[str] | None = None


class Message(_Strict):
    type: Literal["message"] | None = "message"
    id: str
    role: Literal["assistant", "user", "tool", "function", "system", "approval"]
    content: str | list[dict[str, Any]]
    name: str | None = None
    otid: str | None = None
    agent_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    tool_returns: list[ToolReturn] | None = None
    created_at: datetime


class ToolRule(_Strict):
    tool_name: str
    type: Literal[
        "run_first", "exit_loop", "continue_loop", "conditional", "constrain_child_tools",
        "max_count_per_step", "parent_last_tool", "required_before_exit", "requires_approval",
    ]  # fmt: skip


class Agent(_Strict):
    id: str
    name: str
    system: str
    agent_type: str
    tool_ids: list[str]
    block_ids: list[str]
    tool_rules: list[ToolRule] | None = None
    tags: list[str] | None = None
    llm_config: LLMConfig
    embedding_config: EmbeddingConfig
    in_context_message_ids: list[str]
    messages: list[Message]
    files_agents: list[FileAgent]
    source_ids: list[str] | None = None
    group_ids: list[str]


class Block(_Strict):
    id: str
    label: str
    value: str
    limit: int
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] | None = None


class Tool(_Strict):
    id: str
    name: str
    tool_type: TOOL_TYPES
    source_type: str | None = None
    source_code: str | None = None
    json_schema: dict[str, Any]
    tags: list[str]


class Source(_Strict):
    id: str
    name: str
    description: str | None = None
    instructions: str | None = None
    metadata: dict[str, Any] | None = None
    embedding_config: EmbeddingConfig | None = None


class File(_Strict):
    id: str
    source_id: str
    file_name: str | None = None
    original_file_name: str | None = None
    file_type: str | None = None
    file_size: int | None = None
    processing_status: Literal["pending", "parsing", "embedding", "completed", "error"]
    content: str | None = None


class FileAgent(_Strict):
    id: str
    agent_id: str
    file_id: str
    source_id: str
    file_name: str
    is_open: bool
    visible_content: str | None = None
    last_accessed_at: datetime | None = None
    start_line: int | None = None
    end_line: int | None = None


class AgentFileSchema(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agents: list[Agent] = Field(min_length=1)
    groups: list[dict[str, Any]]
    blocks: list[Block]
    files: list[File]
    sources: list[Source]
    tools: list[Tool]
    mcp_servers: list[dict[str, Any]]
    metadata: dict[str, str]
    created_at: datetime | None = None


def check_references(af: AgentFileSchema) -> None:
    """Letta's importer resolves every id an agent names inside the file."""
    blocks, tools = {b.id for b in af.blocks}, {t.id for t in af.tools}
    for a in af.agents:
        assert set(a.block_ids) <= blocks and set(a.tool_ids) <= tools
        ids = {m.id for m in a.messages}
        assert set(a.in_context_message_ids) <= ids
        assert all(m.agent_id in (None, a.id) for m in a.messages)
        sources, files = {x.id for x in af.sources}, {f.id: f.source_id for f in af.files}
        assert set(a.source_ids or []) <= sources
        for fa in a.files_agents:
            assert fa.agent_id == a.id and files[fa.file_id] == fa.source_id
    assert all(f.source_id in {x.id for x in af.sources} for f in af.files)
