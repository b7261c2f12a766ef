"""What the OpenAPI document says per operation (keyed by the route's endpoint name and
method): request body, query parameters, success status and response schema. The response
schemas follow the serializers in protocol/letta.py; tests/fuzz/test_schemathesis.py checks
every response against them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from voice_gateway.protocol.letta import (
    AgentCreate,
    AgentUpdate,
    BlockUpdate,
    MessagesRequest,
    PassageIn,
    ToolIn,
    ToolUpdate,
)
from voice_gateway.protocol.openai_chat import CHAT_ROLES
from voice_gateway.routes.rest_generate import GenerateRequest
from voice_gateway.routes.rest_groups import GroupUpdate
from voice_gateway.routes.rest_mcp import McpServerIn, McpServerPatch, ToolRunIn
from voice_gateway.routes.rest_tool_actions import ToolRun, ToolSearch

Schema = dict[str, Any]
STR: Schema = {"type": "string"}
NSTR: Schema = {"type": ["string", "null"]}
INT: Schema = {"type": "integer"}
BOOL: Schema = {"type": "boolean"}
OBJ: Schema = {"type": "object"}


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


RESPONSES: dict[str, Schema] = {
    "Error": obj({"detail": STR}),
    "Block": obj(
        {"id": STR, "label": STR, "value": STR, "limit": INT, "read_only": BOOL, "version": INT},
        {"description": NSTR, "metadata": OBJ, "updated_at": NSTR},
    ),
    "Tool": obj({"id": STR, "name": STR, "tool_type": STR, "tags": arr(STR)}, {"voice_safe": BOOL}),
    "Agent": obj(
        {
            "id": STR,
            "name": STR,
            "system": STR,
            "model": STR,
            "embedding": NSTR,  # null: created without an embedding model
            "llm_config": OBJ,
            "embedding_config": {"type": ["object", "null"]},
            "memory": obj({"blocks": arr(ref("Block"))}),
            "blocks": arr(ref("Block")),
            "tools": arr(ref("Tool")),
            "tags": arr(STR),
            "metadata": OBJ,
            "voice_default": BOOL,
            "created_at": STR,
            "updated_at": STR,
        },
        {
            "description": NSTR,
            "greeting": NSTR,
            "agent_type": STR,
            "transfer_targets": {"type": "object", "additionalProperties": STR},
            "call_tools": {"type": ["array", "null"], "items": STR},
            "voicemail_message": NSTR,
        },
    ),
    "LettaMessage": obj(
        {
            "id": STR,
            "date": STR,
            "message_type": {
                "enum": [
                    "user_message",
                    "system_message",
                    "assistant_message",
                    "reasoning_message",
                    "tool_call_message",
                    "tool_return_message",
                ]
            },
        }
    ),
    "MessagesResponse": obj(
        {
            "messages": arr(ref("LettaMessage")),
            "stop_reason": obj({"message_type": {"const": "stop_reason"}, "stop_reason": STR}),
            "usage": obj({"message_type": {"const": "usage_statistics"}, "total_tokens": INT}),
        },
        {"error": STR},
    ),
    "Passage": obj({"id": STR, "text": STR, "tags": arr(STR), "created_at": STR, "agent_id": STR}),
    "SearchResults": obj(
        {
            "count": INT,
            "results": arr(
                obj({"id": STR, "content": STR, "timestamp": STR, "tags": arr(STR)}, {"score": {}})
            ),
        }
    ),
    "BlockChange": obj({"created_at": STR}),
    "Group": obj(
        {"id": STR, "manager_type": {"const": "sleeptime"}, "agent_ids": arr(STR)},
        {"description": STR, "sleeptime_agent_frequency": INT, "shared_block_ids": arr(STR)},
    ),
    "Health": obj({"status": STR, "version": STR}),
    "VoiceSession": obj({"session_token": STR, "url": STR}, {"expires_at": {}}),
    "OpenAIError": obj({"error": obj({"message": STR, "type": STR})}),
    "ChatCompletion": obj({"id": STR, "object": {"const": "chat.completion"}, "choices": arr(OBJ)}),
}
NBOOL: Schema = {"type": ["boolean", "null"]}
CONTENT = ("string", "array", "null")
CHAT_REQUEST: Schema = obj(  # protocol/openai_chat.py checks the same
    {
        "model": STR,
        "messages": arr(
            obj({"role": {"enum": list(CHAT_ROLES)}}, {"content": {"type": [*CONTENT]}})
        ),
    },
    {"stream": NBOOL, "voice": NBOOL, "user": NSTR, "conversation_id": NSTR},
)


def q(name: str, schema: Schema, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema}


def limit(hi: int = 1000) -> Schema:
    return q("limit", {"type": "integer", "minimum": 1, "maximum": hi})


CURSORS = [q("after", STR), q("before", STR)]
ORDER = q("order", {"enum": ["asc", "desc"]})
TAGS = q("tags", arr(STR))


@dataclass(frozen=True)
class Op:
    body: type[BaseModel] | Schema | None = None
    query: tuple[Schema, ...] = ()
    status: int = 200
    also: tuple[int, ...] = ()  # other success codes (an upsert: 200 or 201)
    response: Schema | None = None
    media: tuple[str, ...] = ("application/json",)
    errors: str = "Error"  # the schema of error bodies
    form: bool = False  # the body is a form (Twilio webhook), not JSON
    public: bool = False  # no key needed, even on a keyed gateway
    upstream: bool = False  # talks to a server the client named: 502 (refused) / 504 (timed out)


OPS: dict[tuple[str, str], Op] = {
    ("health", "get"): Op(response=ref("Health"), public=True),
    ("create_agent", "post"): Op(AgentCreate, status=201, response=ref("Agent")),
    ("list_agents", "get"): Op(
        query=(limit(), *CURSORS, ORDER, q("name", STR), TAGS), response=arr(ref("Agent"))
    ),
    ("get_agent", "get"): Op(response=ref("Agent")),
    ("update_agent", "patch"): Op(AgentUpdate, response=ref("Agent")),
    ("delete_agent", "delete"): Op(response=ref("Error")),
    ("send_message", "post"): Op(
        MessagesRequest,
        response=ref("MessagesResponse"),
        media=("application/json", "text/event-stream"),
    ),
    ("stream_message", "post"): Op(MessagesRequest, media=("text/event-stream",)),
    ("list_messages", "get"): Op(
        query=(
            limit(),
            *CURSORS,
            ORDER,
            q("conversation_id", STR),
            q("use_assistant_message", BOOL),
        ),
        response=arr(ref("LettaMessage")),
    ),
    ("generate_route", "post"): Op(
        GenerateRequest, response=obj({"content": STR, "model": STR, "usage": OBJ})
    ),
    ("list_groups", "get"): Op(query=(q("manager_type", STR),), response=arr(ref("Group"))),
    ("get_group", "get"): Op(response=ref("Group")),
    ("update_group", "patch"): Op(GroupUpdate, response=ref("Group")),
    ("delete_group", "delete"): Op(response=ref("Error")),
    ("preview_route", "post"): Op(
        MessagesRequest, response=obj({"model": STR, "messages": arr(OBJ)})
    ),
    ("list_blocks", "get"): Op(query=(limit(10_000), *CURSORS), response=arr(ref("Block"))),
    ("get_block", "get"): Op(response=ref("Block")),
    ("update_block", "patch"): Op(BlockUpdate, response=ref("Block")),
    ("block_history", "get"): Op(query=(limit(),), response=arr(ref("BlockChange"))),
    ("list_passages", "get"): Op(
        query=(limit(), q("after", STR), q("ascending", BOOL), q("search", STR)),
        response=arr(ref("Passage")),
    ),
    ("create_passage", "post"): Op(PassageIn, response=arr(ref("Passage"))),
    ("search_passages", "get"): Op(
        query=(
            q("query", {"type": "string", "minLength": 1}, required=True),
            q("top_k", {"type": "integer", "minimum": 1, "maximum": 100}),
            TAGS,
            q("tag_match_mode", {"enum": ["any", "all"]}),
            q("start_datetime", {"type": "string", "format": "date-time"}),
            q("end_datetime", {"type": "string", "format": "date-time"}),
        ),
        response=ref("SearchResults"),
    ),
    ("delete_passage", "delete"): Op(response=ref("Error")),
    ("list_tools", "get"): Op(
        query=(
            limit(10_000),
            *CURSORS,
            ORDER,
            q("name", STR),
            q("names", STR),
            q("search", STR),
            q("tool_types", STR),
            q("exclude_tool_types", STR),
        ),
        response=arr(ref("Tool")),
    ),
    ("create_tool", "post"): Op(ToolIn, status=201, response=ref("Tool")),
    ("upsert_tool", "put"): Op(ToolIn, also=(201,), response=ref("Tool")),
    ("get_tool", "get"): Op(response=ref("Tool")),
    ("modify_tool", "patch"): Op(ToolUpdate, response=ref("Tool")),
    ("delete_tool", "delete"): Op(response=ref("Tool")),
    ("list_agent_tools", "get"): Op(query=(limit(10_000), *CURSORS), response=arr(ref("Tool"))),
    ("run_tool", "post"): Op(ToolRun),
    ("search_tools", "post"): Op(ToolSearch),
    ("list_models", "get"): Op(
        query=(
            q("provider_name", STR),
            q("provider_type", STR),
            q("provider_category", {"enum": ["base", "byok"]}),
        )
    ),
    ("attach_tool", "patch"): Op(response=ref("Agent")),
    ("update_approval", "patch"): Op(obj({"requires_approval": BOOL}), response=ref("Agent")),
    ("create_server", "post"): Op(McpServerIn, status=201, upstream=True),
    ("update_server", "patch"): Op(McpServerPatch, upstream=True),
    ("refresh_server", "patch"): Op(upstream=True),
    ("run_server_tool", "post"): Op(ToolRunIn, upstream=True),
    ("list_server_tools", "get"): Op(response=arr(ref("Tool"))),
    ("get_server_tool", "get"): Op(response=ref("Tool")),
    ("detach_tool", "patch"): Op(response=ref("Agent")),
    ("create_voice_session", "post"): Op(status=201, response=ref("VoiceSession")),
    ("voice_webhook", "post"): Op(
        obj({}, {"agent_id": STR, "CallSid": STR, "From": STR}),
        query=(q("agent_id", STR),),
        media=("application/xml",),
        form=True,
    ),
    ("chat_completions", "post"): Op(
        CHAT_REQUEST,
        response=ref("ChatCompletion"),
        media=("application/json", "text/event-stream"),
        errors="OpenAIError",
    ),
}
