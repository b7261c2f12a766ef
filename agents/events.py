"""Events the agent loop yields while it runs a turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agents.approvals import PendingCall
from agents.llm.base import Usage
from memory.models import MessageData

StopReason = Literal[
    "end_turn", "max_steps", "llm_api_error", "error", "cancelled", "requires_approval"
]


@dataclass(slots=True)
class TextDelta:
    message_id: str
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    message_id: str
    text: str


@dataclass(slots=True)
class ToolArgsDelta:
    """A streamed fragment of a tool call's arguments; `arguments` is everything so far."""

    message_id: str
    index: int
    call_id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ToolCallReady:
    """A complete tool call about to run (`pre_exec_msg` already stripped from `arguments`)."""

    message_id: str
    call_id: str
    name: str
    arguments: str
    pre_exec_msg: str | None = None


@dataclass(slots=True)
class ToolResult:
    message_id: str
    call_id: str
    name: str
    ok: bool
    result: str


@dataclass(slots=True)
class ApprovalRequest:
    """The run stops: these calls wait for a person's approval or the client's result (the
    conversation's next run answers them; agents/approvals.py)."""

    message_id: str
    calls: list[PendingCall]


@dataclass(slots=True)
class MessageSaved:
    message: MessageData


@dataclass(slots=True)
class RunDone:
    turn_id: str
    stop_reason: StopReason
    usage: Usage
    steps: int
    agent_text: str
    error: str | None = None
    message_ids: list[str] = field(default_factory=list)
    llm_ttft_ms: float | None = None
    model: str = ""  # the model handle the turn ran on


AgentEvent = (
    TextDelta
    | ReasoningDelta
    | ToolArgsDelta
    | ToolCallReady
    | ToolResult
    | ApprovalRequest
    | MessageSaved
    | RunDone
)
