"""The tables of agents, memory, conversations, runs, tools and the transcript outbox."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    text,
)
from sqlalchemy import (
    false as sa_false,
)
from sqlalchemy.orm import Mapped, mapped_column

from memory.ids import default_archive_id, utcnow
from memory.orm.base import Base, UTCDateTime


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    api_key_prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    system: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    embedding: Mapped[str] = mapped_column(String(200))
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tool_names: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tool_rules: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default="[]")
    greeting: Mapped[str | None] = mapped_column(Text)
    voice_default: Mapped[bool] = mapped_column(Boolean, default=False)
    context_window: Mapped[int | None] = mapped_column(Integer)
    archival_version: Mapped[int] = mapped_column(Integer, default=0)
    archival_deletes: Mapped[int] = mapped_column(Integer, default=0)
    messages_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    # call control: name -> number or SIP URI; the call tools offered (NULL: all)
    transfer_targets: Mapped[dict[str, Any]] = mapped_column(
        JSON, default=dict, server_default="{}"
    )
    call_tools: Mapped[list[Any] | None] = mapped_column(JSON)
    voicemail_message: Mapped[str | None] = mapped_column(Text)  # pipeline/voicemail.py
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class Block(Base):
    """A core memory block. An agent's own block has `agent_id`; a standalone (shared) block
    has none and reaches agents through `blocks_agents`. `scope` "caller" makes the agent's
    block a template: each caller (identity) gets a copy of their own (`identity_id` set)."""

    __tablename__ = "blocks"
    __table_args__ = (
        Index(
            "uq_blocks_agent_label_identity",
            "agent_id",
            "label",
            func.coalesce(text("identity_id"), ""),
            unique=True,
        ),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_id: Mapped[str | None] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)  # standalone blocks
    identity_id: Mapped[str | None] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), index=True
    )
    scope: Mapped[str] = mapped_column(String(10), default="agent", server_default="agent")
    label: Mapped[str] = mapped_column(String(100))
    value: Mapped[str] = mapped_column(Text, default="")
    limit: Mapped[int] = mapped_column(Integer, default=5000)
    description: Mapped[str | None] = mapped_column(Text)
    read_only: Mapped[bool] = mapped_column(Boolean, default=False)
    sleeptime_editable: Mapped[bool] = mapped_column(Boolean, default=False)
    # scope "file": an open file's window (memory/files.py), closed when the file goes
    file_id: Mapped[str | None] = mapped_column(ForeignKey("files.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class BlockAgent(Base):
    """A block attached to an agent that does not own it (Letta's shared blocks)."""

    __tablename__ = "blocks_agents"
    block_id: Mapped[str] = mapped_column(
        ForeignKey("blocks.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class Identity(Base):
    """A caller (Letta identity): `identifier_key` is the caller key (a phone number, an app's
    user id), unique per owning user."""

    __tablename__ = "identities"
    __table_args__ = (
        Index(
            "uq_identities_owner_key",
            func.coalesce(text("user_id"), ""),
            "identifier_key",
            unique=True,
        ),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    identifier_key: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    identity_type: Mapped[str] = mapped_column(String(20), default="user")
    properties: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class IdentityAgent(Base):
    __tablename__ = "identities_agents"
    identity_id: Mapped[str] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), primary_key=True
    )
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class BlockHistory(Base):
    __tablename__ = "block_history"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    block_id: Mapped[str] = mapped_column(ForeignKey("blocks.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(String(64), index=True)
    label: Mapped[str] = mapped_column(String(100))
    version: Mapped[int] = mapped_column(Integer)
    actor: Mapped[str] = mapped_column(String(20))  # agent | sleeptime | user
    old_value: Mapped[str] = mapped_column(Text)
    new_value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Conversation(Base):
    """One dialogue on an agent: its own context window (messages), summary and turn lock.
    Every agent has a default conversation (`default_conversation_id`)."""

    __tablename__ = "conversations"
    __table_args__ = (Index("ix_conversations_agent_identity", "agent_id", "identity_id"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    identity_id: Mapped[str | None] = mapped_column(
        ForeignKey("identities.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[str | None] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(10))
    summary: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    archived: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    messages_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_active_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_agent_seq", "agent_id", "seq"),
        Index("ix_messages_agent_created", "agent_id", "created_at"),
        Index("ix_messages_conversation_seq", "conversation_id", "seq"),
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    # a message lives and dies with its conversation (a deleted one takes its messages along)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    identity_id: Mapped[str | None] = mapped_column(String(64), index=True)  # the caller
    turn_id: Mapped[str | None] = mapped_column(String(64))
    step_id: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))  # system | user | assistant | tool
    # message | summary | note | approval_request | approval (agents/approvals.py) | system
    kind: Mapped[str] = mapped_column(String(16), default="message")
    content: Mapped[str] = mapped_column(Text, default="")
    reasoning: Mapped[str | None] = mapped_column(Text)
    tool_calls: Mapped[list[Any]] = mapped_column(JSON, default=list)
    tool_call_id: Mapped[str | None] = mapped_column(String(100))
    tool_name: Mapped[str | None] = mapped_column(String(100))
    tool_status: Mapped[str | None] = mapped_column(String(16))
    truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    produced: Mapped[str | None] = mapped_column(Text)  # the full text when cut to what was heard
    in_context: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    otid: Mapped[str | None] = mapped_column(String(64))  # the client's offline threading id


class Run(Base):
    """One agent request (a REST message, a chat completion, a voice turn, a sleeptime pass),
    written by the agent loop with its steps, in each step's own transaction. Its id is the
    turn id its messages carry (`messages.turn_id`)."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_agent_seq", "agent_id", "seq"),)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    # a run goes with its conversation (erasure); runs that store no messages have none
    conversation_id: Mapped[str | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    identity_id: Mapped[str | None] = mapped_column(String(64), index=True)  # the caller
    source: Mapped[str] = mapped_column(String(16), default="text")
    background: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = mapped_column(String(16), default="created")
    stop_reason: Mapped[str | None] = mapped_column(String(48))
    error: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    step_count: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    ttft_ns: Mapped[int | None] = mapped_column(BigInteger)
    total_duration_ns: Mapped[int | None] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # a voice turn's
    request_config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Step(Base):
    """One model call of a run: model, tokens, timing (ns), status; its messages carry its id."""

    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_agent_seq", "agent_id", "seq"),)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(String(64))
    conversation_id: Mapped[str | None] = mapped_column(String(64))
    identity_id: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), default="success")
    stop_reason: Mapped[str | None] = mapped_column(String(48))
    error: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    step_start_ns: Mapped[int | None] = mapped_column(BigInteger)
    step_ns: Mapped[int | None] = mapped_column(BigInteger)
    llm_request_ns: Mapped[int | None] = mapped_column(BigInteger)
    ttft_ns: Mapped[int | None] = mapped_column(BigInteger)
    tool_execution_ns: Mapped[int | None] = mapped_column(BigInteger)
    feedback: Mapped[str | None] = mapped_column(String(10))
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


def _passage_archive(ctx: Any) -> str | None:
    agent_id = ctx.get_current_parameters().get("agent_id")
    return default_archive_id(agent_id) if agent_id else None


class Passage(Base):
    """A passage of an archive: the agent's own (`agent_id` set, its default archive), a
    shared archive's (`agent_id` NULL), or a chunk of a file (`file_id`, a folder's archive)."""

    __tablename__ = "passages"
    __table_args__ = (
        Index("ix_passages_agent_seq", "agent_id", "seq"),
        Index("ix_passages_agent_created", "agent_id", "created_at"),
        Index("ix_passages_archive_seq", "archive_id", "seq"),
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    archive_id: Mapped[str] = mapped_column(
        ForeignKey("archives.id", ondelete="CASCADE"), default=_passage_archive
    )
    file_id: Mapped[str | None] = mapped_column(
        ForeignKey("files.id", ondelete="CASCADE"), index=True
    )
    text: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)
    embedding_handle: Mapped[str] = mapped_column(String(200))
    # a caller's own passage (sleeptime from their calls); NULL: agent-wide, seen by every caller
    identity_id: Mapped[str | None] = mapped_column(String(64), index=True)
    source_event_id: Mapped[str | None] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Tool(Base):
    __tablename__ = "tools"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(100), index=True)
    description: Mapped[str | None] = mapped_column(Text)
    json_schema: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source_type: Mapped[str] = mapped_column(String(20), default="python")
    source_code: Mapped[str | None] = mapped_column(Text)
    tool_type: Mapped[str] = mapped_column(String(40), default="custom")
    tags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # custom and MCP tools are offered in voice unless taken out (docs/tools.md)
    voice_safe: Mapped[bool] = mapped_column(Boolean, default=True)
    mcp_server_id: Mapped[str | None] = mapped_column(String(64), index=True)  # MCP tools
    return_char_limit: Mapped[int | None] = mapped_column(Integer)  # None: the server's limit
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class McpServer(Base):
    """An MCP server a user registered (migration 0007); secrets are stored encrypted."""

    __tablename__ = "mcp_servers"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str | None] = mapped_column(String(64), index=True)
    server_name: Mapped[str] = mapped_column(String(100))
    server_type: Mapped[str] = mapped_column(String(20))  # streamable_http | sse | stdio
    server_url: Mapped[str | None] = mapped_column(Text)
    command: Mapped[str | None] = mapped_column(Text)
    args: Mapped[list[Any]] = mapped_column(JSON, default=list)
    secrets: Mapped[str | None] = mapped_column(Text)  # Fernet token of {token, headers, env}
    voice_safe_tools: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


Index(
    "uq_mcp_servers_owner_name",
    func.coalesce(McpServer.user_id, ""),
    McpServer.server_name,
    unique=True,
)


# one name per owner (server tools: user_id NULL); migration 0004
Index("uq_tools_owner_name", func.coalesce(Tool.user_id, ""), Tool.name, unique=True)


class Outbox(Base):
    """Finished turns waiting to be published to the transcript bus (same tx as the messages)."""

    __tablename__ = "outbox"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(String(64), unique=True)
    agent_id: Mapped[str] = mapped_column(String(64), index=True)
    identity_id: Mapped[str | None] = mapped_column(String(64), index=True)
    # a turn of a conversation deleted meanwhile is not queued (the insert fails, and with it
    # the turn's transaction), and deleting a conversation takes its queued turns along
    conversation_id: Mapped[str | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class ProcessedEvent(Base):
    """Transcript events already applied by a sleeptime worker (idempotency)."""

    __tablename__ = "processed_events"
    event_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    agent_id: Mapped[str] = mapped_column(String(64), index=True)
    processed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class SleeptimeState(Base):
    """Sleeptime progress per agent and caller ("" = no caller): turns seen since the last
    memory rewrite. Each caller's transcripts rewrite that caller's blocks only."""

    __tablename__ = "sleeptime_state"
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
    )
    identity_id: Mapped[str] = mapped_column(String(64), primary_key=True, default="")
    pending_turns: Mapped[int] = mapped_column(Integer, default=0)
    pending_events: Mapped[list[Any]] = mapped_column(JSON, default=list)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    runs: Mapped[int] = mapped_column(Integer, default=0)
    lag_ms_last: Mapped[float | None] = mapped_column(Float)


class UserLimits(Base):
    """Per-user overrides of the rate limits and quotas (NULL: the server default)."""

    __tablename__ = "user_limits"
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    rps: Mapped[float | None] = mapped_column(Float)
    burst: Mapped[int | None] = mapped_column(Integer)
    max_calls: Mapped[int | None] = mapped_column(Integer)
    call_minutes: Mapped[float | None] = mapped_column(Float)  # per UTC day
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class CallUsage(Base):
    """Seconds of voice calls per quota identity ("user:<id>", "admin", "anon:<ip>") and UTC
    day; every gateway instance adds to the same row."""

    __tablename__ = "call_usage"
    identity: Mapped[str] = mapped_column(String(200), primary_key=True)
    day: Mapped[str] = mapped_column(String(10), primary_key=True)  # YYYY-MM-DD (UTC)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
