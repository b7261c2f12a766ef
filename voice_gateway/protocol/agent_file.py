"""Letta's agent file (`.af`, the multi-entity "v2" format of Letta 0.16): what an import reads.

The models take what the importer uses, typed, and let every other field of Letta's schema pass
(`extra="allow"`): a file written by a newer Letta still reads. `parse_agent_file` turns the
uploaded bytes into an `AgentFile` or raises `AgentFileError` naming the FIRST problem (the
422 detail). The export side is protocol/agent_file_out.py."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ToolRuleType = Literal[
    "run_first",
    "exit_loop",
    "continue_loop",
    "conditional",
    "constrain_child_tools",
    "max_count_per_step",
    "parent_last_tool",
    "required_before_exit",
    "requires_approval",
]


class AgentFileError(ValueError):
    """The upload is not an agent file this server can import; the message names why."""


class _In(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionIn(_In):
    name: str = Field(min_length=1, max_length=100)
    arguments: str | dict[str, Any] = ""

    def text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class ToolCallIn(_In):
    id: str = Field(min_length=1, max_length=100)
    function: FunctionIn


class ToolReturnIn(_In):
    tool_call_id: str | None = None
    status: Literal["success", "error"] = "success"
    func_response: str | None = None


class MessageIn(_In):
    id: str
    role: Literal["system", "user", "assistant", "tool", "approval"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    otid: str | None = Field(None, max_length=64)
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = Field(None, max_length=100)
    tool_returns: list[ToolReturnIn] | None = None
    created_at: datetime | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(
            str(p.get("text") or "") for p in self.content or [] if p.get("type") == "text"
        )

    def reasoning(self) -> str | None:
        parts = [
            str(p.get("reasoning") or "")
            for p in self.content or []
            if isinstance(p, dict) and p.get("type") == "reasoning"
        ]
        return "".join(parts) or None


class BlockIn(_In):
    id: str
    label: str = Field(min_length=1, max_length=100)
    value: str = ""
    limit: int | None = Field(None, ge=1)
    description: str | None = None
    read_only: bool = False
    metadata: dict[str, Any] | None = None


class ToolIn(_In):
    id: str
    name: str = Field(min_length=1, max_length=100)
    tool_type: str | None = "custom"
    source_type: str | None = None
    source_code: str | None = None
    json_schema: dict[str, Any] | None = None
    args_json_schema: dict[str, Any] | None = None
    description: str | None = None
    tags: list[str] | None = None
    pip_requirements: list[Any] | None = None
    npm_requirements: list[Any] | None = None
    return_char_limit: int | None = Field(None, ge=1, le=1_000_000)


class ToolRuleIn(_In):
    tool_name: str = Field(min_length=1)
    type: ToolRuleType


class LLMConfigIn(_In):
    model: str | None = None
    model_endpoint_type: str | None = None
    handle: str | None = None
    context_window: int | None = None


class EmbeddingConfigIn(_In):
    embedding_model: str | None = None
    embedding_endpoint_type: str | None = None
    handle: str | None = None


class SourceIn(_In):
    """A source (folder) of the file."""

    id: str
    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(None, max_length=10_000)
    instructions: str | None = Field(None, max_length=10_000)
    metadata: dict[str, Any] | None = None
    embedding: str | None = None
    embedding_chunk_size: int | None = Field(None, ge=100, le=8000)
    embedding_config: EmbeddingConfigIn | None = None


class FileIn(_In):
    """A file of a source, with the text extracted from it (`content`)."""

    id: str
    source_id: str
    file_name: str = Field(min_length=1, max_length=300)
    original_file_name: str | None = Field(None, max_length=300)
    file_type: str | None = Field(None, max_length=100)
    file_size: int | None = Field(None, ge=0)
    processing_status: str | None = None
    error_message: str | None = None
    content: str | None = None


class FileAgentIn(_In):
    """An agent's file (Letta's file-agent relationship): open or closed, and what shows."""

    id: str
    agent_id: str | None = None
    file_id: str
    source_id: str | None = None
    file_name: str | None = None
    is_open: bool = False
    visible_content: str | None = None
    start_line: int | None = Field(None, ge=1)
    end_line: int | None = Field(None, ge=1)
    last_accessed_at: datetime | None = None


class AgentIn(_In):
    id: str
    name: str | None = Field(None, max_length=200)
    system: str | None = None
    description: str | None = None
    agent_type: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    tool_ids: list[str] | None = None
    block_ids: list[str] | None = None
    memory_blocks: list[BlockIn | dict[str, Any]] | None = None
    tool_rules: list[ToolRuleIn] | None = None
    llm_config: LLMConfigIn | None = None
    embedding_config: EmbeddingConfigIn | None = None
    model: str | None = None
    embedding: str | None = None
    context_window_limit: int | None = None
    max_files_open: int | None = None
    in_context_message_ids: list[str] = Field(default_factory=list)
    messages: list[MessageIn] = Field(default_factory=list)
    source_ids: list[str] | None = None
    files_agents: list[FileAgentIn] = Field(default_factory=list)


class AgentFile(_In):
    agents: list[AgentIn] = Field(min_length=1, max_length=50)
    groups: list[dict[str, Any]] = Field(default_factory=list)
    blocks: list[BlockIn] = Field(default_factory=list)
    files: list[FileIn] = Field(default_factory=list)
    sources: list[SourceIn] = Field(default_factory=list)
    tools: list[ToolIn] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime | None = None


def parse_agent_file(raw: bytes) -> AgentFile:
    """The agent file in `raw`, or AgentFileError naming the first problem."""
    try:
        data: Any = json.loads(raw)
        if isinstance(data, str):  # some Letta exports saved the JSON text as a JSON string
            data = json.loads(data)
    except UnicodeDecodeError as exc:
        raise AgentFileError(f"not an agent file: not UTF-8 text ({exc.reason})") from exc
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise AgentFileError(f"not an agent file: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise AgentFileError(
            f"not an agent file: the JSON is a {type(data).__name__}, not an object"
        )
    if "agents" not in data:
        if "core_memory" in data or {"llm_config", "messages"} <= set(data):
            raise AgentFileError(
                "the legacy single-agent (v1) agent file format is not supported: export it "
                "again from Letta with use_legacy_format=false"
            )
        raise AgentFileError("not a Letta agent file: no 'agents' list at the top level")
    try:
        af = AgentFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise AgentFileError(f"{where}: {err.get('msg')}") from exc
    _check_references(af)
    return af


def _unique(kind: str, ids: list[str]) -> set[str]:
    seen: set[str] = set()
    for n, ref in enumerate(ids):
        if ref in seen:
            raise AgentFileError(f"{kind}.{n}.id: '{ref}' is in the file twice")
        seen.add(ref)
    return seen


def _check_files(af: AgentFile) -> None:
    """Sources, files and the agents' files name each other consistently."""
    sources = _unique("sources", [x.id for x in af.sources])
    file_source = {f.id: f.source_id for f in af.files}
    _unique("files", [f.id for f in af.files])
    for n, f in enumerate(af.files):
        if f.source_id not in sources:
            raise AgentFileError(f"files.{n}.source_id: '{f.source_id}' is not in the file")
    for i, agent in enumerate(af.agents):
        attached = set(agent.source_ids or [])
        for ref in agent.source_ids or []:
            if ref not in sources:
                raise AgentFileError(f"agents.{i}.source_ids: '{ref}' is not in the file")
        _unique(f"agents.{i}.files_agents", [fa.id for fa in agent.files_agents])
        for k, fa in enumerate(agent.files_agents):
            where = f"agents.{i}.files_agents.{k}"
            source = file_source.get(fa.file_id)
            if source is None:
                raise AgentFileError(f"{where}.file_id: '{fa.file_id}' is not in the file")
            if fa.source_id is not None and fa.source_id != source:
                raise AgentFileError(
                    f"{where}.source_id: '{fa.source_id}' is not the source of '{fa.file_id}'"
                )
            if fa.agent_id is not None and fa.agent_id != agent.id:
                raise AgentFileError(f"{where}.agent_id: '{fa.agent_id}' is not '{agent.id}'")
            if source not in attached:
                raise AgentFileError(
                    f"{where}: the source of '{fa.file_id}' ('{source}') is not in "
                    f"agents.{i}.source_ids"
                )


def _check_references(af: AgentFile) -> None:
    _check_files(af)
    blocks, tools = {b.id for b in af.blocks}, {t.id for t in af.tools}
    for i, agent in enumerate(af.agents):
        for key, known in (("block_ids", blocks), ("tool_ids", tools)):
            for ref in getattr(agent, key) or []:
                if ref not in known:
                    raise AgentFileError(f"agents.{i}.{key}: '{ref}' is not in the file")
        for j, m in enumerate(agent.messages):
            for part in m.content if isinstance(m.content, list) else []:
                if not isinstance(part.get("type"), str):
                    raise AgentFileError(f"agents.{i}.messages.{j}.content: a part has no type")
