"""A realistic agent file as Letta 0.16 exports one (a letta_v1_agent, v2 format): blocks
`human` and `persona`, a conversation with reasoning, tool calls and tool returns, a custom tool
with its source, Letta built-ins (one this server lacks) and tool rules. Written by hand from
Letta's schema and its published `.af` examples."""

from __future__ import annotations

import json
from typing import Any

SOURCE = '''def lookup_order(order_id: int) -> str:
    """Look up the shipping status of an order.

    Args:
        order_id (int): The order number.

    Returns:
        str: The status of the order.
    """
    return f"Order {order_id}: shipped on Monday"
'''
RULES = [
    {
        "tool_name": "lookup_order",
        "type": "constrain_child_tools",
        "children": ["core_memory_append"],
    },
    {"tool_name": "conversation_search", "type": "max_count_per_step", "max_count_limit": 2},
]


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "signature": None}]


def _msg(n: int, role: str, content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "role": role,
        "content": content,
        "name": None,
        "otid": None,
        "sender_id": None,
        "batch_item_id": None,
        "group_id": None,
        "id": f"message-{n}",
        "model": "gpt-4o-mini" if role == "assistant" else None,
        "agent_id": "agent-0",
        "tool_calls": None,
        "tool_call_id": None,
        "tool_returns": [],
        "created_at": f"2026-02-03T10:00:{n:02d}.123456+00:00",
        "approve": None,
        "approval_request_id": None,
        "denial_reason": None,
        "approvals": [],
        **extra,
    }


def _call(call_id: str, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
    ]


def _return(n: int, call_id: str, name: str, text: str) -> dict[str, Any]:
    ret = {
        "tool_call_id": call_id,
        "status": "success",
        "stdout": [],
        "stderr": [],
        "func_response": text,
    }
    return _msg(n, "tool", _text(text), name=name, tool_call_id=call_id, tool_returns=[ret])


def _tool(n: int, name: str, tool_type: str, source: str | None) -> dict[str, Any]:
    return {
        "id": f"tool-{n}",
        "tool_type": tool_type,
        "description": f"The {name} tool.",
        "source_type": "python",
        "name": name,
        "tags": [] if tool_type == "custom" else [tool_type],
        "source_code": source,
        "json_schema": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer", "description": "The order number."}},
                "required": ["order_id"],
            },
        }
        if source
        else {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
        "args_json_schema": None,
        "return_char_limit": 6000,
        "pip_requirements": None,
        "npm_requirements": None,
        "default_requires_approval": None,
        "enable_parallel_execution": False,
        "created_by_id": "user-88cbf1ea-8099-48d4-8298-ecc0992dc64d",
        "last_updated_by_id": "user-88cbf1ea-8099-48d4-8298-ecc0992dc64d",
        "metadata_": None,
    }


def letta_file() -> dict[str, Any]:
    """An agent file as Letta 0.16 exports one (letta_v1_agent, v2 format)."""
    messages = [
        _msg(
            0, "system", _text("You are Ada's support agent.\n\n<memory_blocks>...</memory_blocks>")
        ),
        _msg(1, "user", _text("Hi, I'm Ada. Where is my order 1042?")),
        _msg(
            2,
            "assistant",
            [
                {
                    "type": "reasoning",
                    "is_native": True,
                    "reasoning": "Look the order up.",
                    "signature": None,
                }
            ],
            tool_calls=_call("call_lookup1", "lookup_order", {"order_id": 1042}),
        ),
        _return(3, "call_lookup1", "lookup_order", "Order 1042: shipped on Monday"),
        _msg(4, "assistant", _text("Your order 1042 shipped on Monday.")),
        _msg(5, "user", _text("Thanks! Remember that I prefer email.")),
        _msg(
            6,
            "assistant",
            [],
            tool_calls=_call(
                "call_mem2", "core_memory_append", {"label": "human", "content": "Prefers email."}
            ),
        ),
        _return(7, "call_mem2", "core_memory_append", "None"),
        _msg(8, "assistant", _text("Noted: email it is.")),
    ]
    agent = {
        "name": "ada-support",
        "memory_blocks": [],
        "tools": [],
        "tool_ids": ["tool-0", "tool-1", "tool-2", "tool-3"],
        "source_ids": [],
        "folder_ids": None,
        "block_ids": ["block-0", "block-1"],
        "tool_rules": RULES,
        "tags": ["support", "orders"],
        "system": "You are Ada's support agent.",
        "agent_type": "letta_v1_agent",
        "initial_message_sequence": None,
        "include_base_tools": False,
        "include_multi_agent_tools": False,
        "include_base_tool_rules": False,
        "include_default_source": False,
        "description": "Answers questions about orders",
        "metadata": {"team": "support"},
        "llm_config": {
            "model": "gpt-4o-mini",
            "model_endpoint_type": "openai",
            "model_endpoint": "https://api.openai.com/v1",
            "context_window": 32000,
            "handle": "openai/gpt-4o-mini",
            "temperature": 0.7,
        },
        "embedding_config": {
            "embedding_endpoint_type": "openai",
            "embedding_model": "text-embedding-3-small",
            "embedding_dim": 1536,
            "embedding_chunk_size": 300,
            "handle": "openai/text-embedding-3-small",
        },
        "model": None,
        "embedding": None,
        "context_window_limit": None,
        "tool_exec_environment_variables": {},
        "timezone": "UTC",
        "max_files_open": 5,
        "per_file_view_window_char_limit": 15000,
        "id": "agent-0",
        "in_context_message_ids": [m["id"] for m in messages],
        "messages": messages,
        "files_agents": [],
        "group_ids": [],
    }
    block = {
        "limit": 20000,
        "project_id": None,
        "template_name": None,
        "is_template": False,
        "preserve_on_migration": False,
        "read_only": False,
        "metadata": {},
        "hidden": None,
    }
    return {
        "agents": [agent],
        "groups": [],
        "blocks": [
            {
                **block,
                "id": "block-0",
                "label": "human",
                "value": "Name: Ada. Customer since 2021.",
                "description": "The human block.",
            },
            {
                **block,
                "id": "block-1",
                "label": "persona",
                "value": "I am a patient support agent.",
                "description": "The persona block.",
            },
        ],
        "files": [],
        "sources": [],
        "tools": [
            _tool(0, "lookup_order", "custom", SOURCE),
            _tool(1, "conversation_search", "letta_core", None),
            _tool(2, "web_search", "letta_builtin", None),
            _tool(3, "core_memory_append", "letta_memory_core", None),
        ],
        "mcp_servers": [],
        "metadata": {"revision_id": "b1c2d3e4f5a6"},
        "created_at": "2026-02-03T10:01:00.000000+00:00",
    }
