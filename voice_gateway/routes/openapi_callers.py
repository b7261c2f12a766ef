"""OpenAPI operations of conversations, shared blocks and identities (merged into the
document by openapi.py, like the table in openapi_schemas.py)."""

from __future__ import annotations

from voice_gateway.protocol.letta_callers import (
    AgentNamed,
    BlockCreate,
    ConversationCreate,
    ConversationMessages,
    ConversationUpdate,
    IdentityCreate,
    IdentityUpdate,
    SharedBlockUpdate,
)
from voice_gateway.routes.openapi_schemas import (
    BOOL,
    CURSORS,
    NSTR,
    OBJ,
    ORDER,
    STR,
    Op,
    Schema,
    arr,
    limit,
    obj,
    q,
    ref,
)

AGENT_Q = q("agent_id", STR)
CALLER_RESPONSES: dict[str, Schema] = {
    "Conversation": obj(
        {"id": STR, "agent_id": STR, "archived": BOOL, "created_at": STR, "updated_at": STR},
        {
            "summary": NSTR,
            "model": NSTR,
            "identity_id": NSTR,
            "in_context_message_ids": {"type": ["array", "null"], "items": STR},
        },
    ),
    "Compaction": obj(
        {
            "num_messages_before": {"type": "integer"},
            "num_messages_after": {"type": "integer"},
            "summary": STR,
        }
    ),
    "Identity": obj(
        {
            "id": STR,
            "identifier_key": STR,
            "name": STR,
            "identity_type": STR,
            "agent_ids": arr(STR),
            "block_ids": arr(STR),
            "properties": arr(OBJ),
        },
        {"project_id": NSTR},
    ),
}
_CONV = ref("Conversation")
_SSE = ("application/json", "text/event-stream")

CALLER_OPS: dict[tuple[str, str], Op] = {
    ("create_conversation", "post"): Op(
        ConversationCreate, query=(q("agent_id", STR, required=True),), response=_CONV
    ),
    ("list_conversations", "get"): Op(
        query=(
            limit(),
            q("after", STR),
            ORDER,
            q("order_by", {"enum": ["created_at", "last_run_completion", "last_message_at"]}),
            AGENT_Q,
            q("archive_status", {"enum": ["unarchived", "archived", "all"]}),
            q("summary_search", STR),
        ),
        response=arr(_CONV),
    ),
    ("get_conversation", "get"): Op(query=(AGENT_Q,), response=_CONV),
    ("update_conversation", "patch"): Op(ConversationUpdate, query=(AGENT_Q,), response=_CONV),
    ("delete_conversation", "delete"): Op(query=(AGENT_Q,), response=ref("Error")),
    ("cancel_conversation", "post"): Op(query=(AGENT_Q,), response=OBJ),
    ("send_conversation_message", "post"): Op(
        ConversationMessages, response=ref("MessagesResponse"), media=_SSE
    ),
    ("list_conversation_messages", "get"): Op(
        query=(limit(), *CURSORS, ORDER, AGENT_Q), response=arr(ref("LettaMessage"))
    ),
    ("resume_stream", "post"): Op(AgentNamed, media=("text/event-stream",)),
    ("compact_conversation", "post"): Op(AgentNamed, response=ref("Compaction")),
    ("fork_conversation", "post"): Op(
        query=(AGENT_Q, q("message_id", STR), q("hidden", BOOL)), response=_CONV
    ),
    ("recompile_conversation", "post"): Op(AgentNamed, query=(q("dry_run", BOOL),), response=STR),
    ("create_shared_block", "post"): Op(BlockCreate, response=ref("Block")),
    ("list_shared_blocks", "get"): Op(
        query=(limit(), q("after", STR), ORDER, q("label", STR), q("identity_id", STR)),
        response=arr(ref("Block")),
    ),
    ("get_shared_block", "get"): Op(response=ref("Block")),
    ("update_shared_block", "patch"): Op(SharedBlockUpdate, response=ref("Block")),
    ("delete_shared_block", "delete"): Op(response=ref("Error")),
    ("block_agents", "get"): Op(
        query=(limit(), *CURSORS, ORDER, q("order_by", {"enum": ["created_at"]})),
        response=arr(ref("Agent")),
    ),
    ("attach_block", "patch"): Op(response=ref("Agent")),
    ("detach_block", "patch"): Op(response=ref("Agent")),
    ("list_identities", "get"): Op(
        query=(limit(), q("after", STR), AGENT_Q, q("identifier_key", STR), q("name", STR)),
        response=arr(ref("Identity")),
    ),
    ("create_identity", "post"): Op(IdentityCreate, status=201, response=ref("Identity")),
    ("upsert_identity", "put"): Op(IdentityCreate, response=ref("Identity")),
    ("get_identity", "get"): Op(response=ref("Identity")),
    ("update_identity", "patch"): Op(IdentityUpdate, response=ref("Identity")),
    ("delete_identity", "delete"): Op(response=ref("Error")),
    ("attach_identity", "patch"): Op(response=ref("Identity")),
    ("detach_identity", "patch"): Op(response=ref("Identity")),
}
