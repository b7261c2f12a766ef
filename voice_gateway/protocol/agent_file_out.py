"""Letta's agent file (`.af`, v2) as this server writes it: one agent with its blocks, tools
(custom ones with their source), tool rules and messages, in the shape of Letta 0.16's
`AgentFileSchema`, so that Letta (and this server) import it. Ids inside the file are the
file's own (`agent-0`, `block-0`, `tool-0`, `message-0`), as Letta writes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agents.tools.registry import Tool
from memory.files import FileData, FolderData
from memory.models import AgentData, BlockData, MessageData
from memory.open_files import AgentFile
from memory.tools import ToolData
from voice_gateway.protocol.letta import LETTA_LLM_TYPES, LOCAL_EMBED_DIM, iso, tool_json
from voice_gateway.protocol.letta_sources import file_json, folder_json

REVISION = "voice-gateway-1"  # metadata.revision_id: who wrote the file
TOOL_RULES_KEY = "tool_rules"  # agent metadata key that holds imported tool rules (for now)
EXTRAS_KEY = "voice_gateway"  # our own agent fields, kept in the file's agent metadata


def agent_extras(agent: AgentData) -> dict[str, Any]:
    """The agent's fields Letta has no place for (voice and call control), those set."""
    extras: dict[str, Any] = {"greeting": agent.greeting, "call_tools": agent.call_tools}
    extras |= {"voice_default": agent.voice_default or None}
    extras |= {"transfer_targets": agent.transfer_targets or None}
    extras |= {"voicemail_message": agent.voicemail_message}
    return {k: v for k, v in extras.items() if v is not None}


def _block(b: BlockData, n: int) -> dict[str, Any]:
    return {
        "id": f"block-{n}",
        "label": b.label,
        "value": b.value,
        "limit": b.limit,
        "description": b.description,
        "read_only": b.read_only,
        "is_template": False,
        "preserve_on_migration": False,
        "template_name": None,
        "metadata": {"sleeptime_editable": b.sleeptime_editable, "scope": b.scope},
    }


def _tool(t: Tool | ToolData, n: int) -> dict[str, Any]:
    if isinstance(t, ToolData):
        body: dict[str, Any] = {
            "name": t.name,
            "description": t.description,
            "tool_type": "custom",
            "source_type": t.source_type,
            "source_code": t.source_code,
            "json_schema": t.json_schema,
            "tags": t.tags,
            "metadata_": {"voice_safe": t.voice_safe},
        }
    else:
        out = tool_json(t)
        body = {k: out[k] for k in ("name", "description", "tool_type", "json_schema", "tags")}
        body |= {"source_type": "python", "source_code": None, "metadata_": out["metadata_"]}
    return {
        **body,
        "id": f"tool-{n}",
        "args_json_schema": None,
        "return_char_limit": (isinstance(t, ToolData) and t.return_char_limit) or 50000,
        "pip_requirements": None,
        "npm_requirements": None,
        "default_requires_approval": None,
        "enable_parallel_execution": False,
    }


def _message(m: MessageData, mid: str, agent_fid: str, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if m.reasoning:
        content.append(
            {"type": "reasoning", "is_native": False, "reasoning": m.reasoning, "signature": None}
        )
    if m.content or m.role != "assistant":
        content.append({"type": "text", "text": m.content})
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in m.tool_calls
    ]
    returns = []
    if m.role == "tool":
        status = "success" if m.tool_status in (None, "success") else "error"
        returns.append(
            {
                "tool_call_id": m.tool_call_id,
                "status": status,
                "func_response": m.content,
                "stdout": None,
                "stderr": None,
            }
        )
    return {
        "type": "message",
        "id": mid,
        "role": m.role,
        "content": content,
        "name": m.tool_name if m.role == "tool" else None,
        "otid": m.otid,
        "sender_id": None,
        "batch_item_id": None,
        "group_id": None,
        "model": model if m.role == "assistant" else None,
        "agent_id": agent_fid,
        "tool_calls": calls or None,
        "tool_call_id": m.tool_call_id,
        "tool_returns": returns,
        "created_at": iso(m.created_at),
        "approve": None,
        "approval_request_id": None,
        "denial_reason": None,
        "approvals": [],
    }


def agent_file(
    agent: AgentData,
    blocks: list[BlockData],
    tools: list[Tool | ToolData],
    messages: list[MessageData],
    system_prompt: str,
    context_window: int,
) -> dict[str, Any]:
    """The agent file of one agent. `messages` in order (those in context flagged); the first
    message is the compiled system prompt, as in Letta's exports."""
    provider, _, model = agent.model.partition("/")
    emb_provider, _, emb_model = agent.embedding.partition("/")
    metadata = dict(agent.metadata)
    # the agent's enforced rules (files imported before rules were enforced kept them here)
    rules = agent.tool_rules or metadata.pop(TOOL_RULES_KEY, None) or []
    metadata.pop(TOOL_RULES_KEY, None)
    if extras := agent_extras(agent):
        metadata[EXTRAS_KEY] = extras
    system = MessageData(id="", agent_id=agent.id, role="system", content=system_prompt)
    system.created_at = agent.created_at
    out_messages = [_message(system, "message-0", "agent-0", model)]
    in_context = ["message-0"]
    for n, m in enumerate(messages, start=1):
        out_messages.append(_message(m, f"message-{n}", "agent-0", model))
        if m.in_context:
            in_context.append(f"message-{n}")
    file_agent = {
        "id": "agent-0",
        "name": agent.name,
        "description": agent.description,
        "system": agent.system,
        "agent_type": "letta_v1_agent",
        "tags": agent.tags,
        "metadata": metadata,
        "memory_blocks": [],
        "tools": [],
        "tool_ids": [f"tool-{n}" for n in range(len(tools))],
        "source_ids": [],
        "folder_ids": None,
        "block_ids": [f"block-{n}" for n in range(len(blocks))],
        "tool_rules": rules,
        "initial_message_sequence": None,
        "include_base_tools": False,
        "include_multi_agent_tools": False,
        "include_base_tool_rules": False,
        "include_default_source": False,
        "llm_config": {
            "model": model,
            "model_endpoint_type": LETTA_LLM_TYPES.get(provider, "openai"),
            "context_window": agent.context_window or context_window,
            "handle": agent.model,
        },
        "embedding_config": {
            "embedding_model": emb_model,
            "embedding_endpoint_type": "openai" if emb_provider == "openai" else "hugging-face",
            "embedding_dim": LOCAL_EMBED_DIM if emb_provider == "local" else 1536,
            "embedding_chunk_size": 300,
            "handle": agent.embedding,
        },
        "model": None,
        "embedding": None,
        "context_window_limit": agent.context_window,
        "tool_exec_environment_variables": {},
        "enable_sleeptime": False,
        "message_buffer_autoclear": False,
        "timezone": "UTC",
        "max_files_open": metadata.get("max_files_open"),
        "in_context_message_ids": in_context,
        "messages": out_messages,
        "files_agents": [],
        "group_ids": [],
    }
    return {
        "agents": [file_agent],
        "groups": [],
        "blocks": [_block(b, n) for n, b in enumerate(blocks)],
        "files": [],
        "sources": [],
        "tools": [_tool(t, n) for n, t in enumerate(tools)],
        "mcp_servers": [],
        "metadata": {"revision_id": REVISION},
        "created_at": datetime.now(UTC).isoformat(),
    }


def add_sources(
    body: dict[str, Any], folders: list[FolderData], files: list[FileData], state: list[AgentFile]
) -> None:
    """Put the agent's folders (`sources`), their files with their text (`files`) and the
    agent's open/closed state of each (`agents[0].files_agents`) into its agent file."""
    source_ids = {f.id: f"source-{n}" for n, f in enumerate(folders)}
    file_ids = {f.id: f"file-{n}" for n, f in enumerate(files)}
    for n, folder in enumerate(folders):
        out = folder_json(folder)
        body["sources"].append(
            {
                "id": f"source-{n}",
                **{k: out[k] for k in ("name", "description", "instructions", "metadata")},
                "embedding": folder.embedding,
                "embedding_chunk_size": folder.chunk_size,
                "embedding_config": out["embedding_config"],
            }
        )
    for f in files:
        out = file_json(f, content=True)
        out.update(id=file_ids[f.id], source_id=source_ids[f.folder_id])
        out.update(file_creation_date=None, file_last_modified_date=None)
        body["files"].append(out)
    agent = body["agents"][0]
    agent["source_ids"] = list(source_ids.values())
    agent["files_agents"] = [
        {
            "id": f"file_agent-{n}",
            "agent_id": agent["id"],
            "file_id": file_ids[s.file_id],
            "source_id": source_ids[s.folder_id],
            "file_name": s.file_name,
            "is_open": s.is_open,
            "visible_content": s.visible_content,
            "start_line": s.start_line,
            "end_line": s.end_line,
            "last_accessed_at": iso(s.last_accessed_at) if s.last_accessed_at else None,
        }
        for n, s in enumerate(x for x in state if x.file_id in file_ids)
    ]
