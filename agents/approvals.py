"""Approvals and client-side tools: calls that wait for a person or for the caller's client.

A step whose calls need a decision (a `requires_approval` rule, or a client tool) is stored as
an assistant message of kind `approval_request` and the run stops (`requires_approval`). The
conversation's next run answers it (`Answer`s: approve, deny with a reason, or a client tool's
result) before anything else; the loop then runs the approved calls and goes on. Nothing runs
without its answer: an unanswered call that needs one is denied.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from memory.ids import default_conversation_id
from memory.models import MessageData, ToolCallData

if TYPE_CHECKING:
    from memory.service import Memory

DENIED = "Error: request to call tool denied. User reason: {reason}"  # Letta's wording
NO_ANSWER = "no approval was given"
NO_RESULT = "Error: the client returned no result for this call"
NOT_RUN = "Error: not run: the run stopped before an approval in the same step was answered"


class NotWaiting(Exception):
    """An answer for a conversation that waits for none (or for other calls)."""


@dataclass(slots=True)
class Answer:
    """One answer to a pending call: an approval decision or a client tool's result."""

    call_id: str
    kind: Literal["approval", "tool"] = "approval"
    approve: bool = False
    reason: str | None = None
    tool_return: str = ""
    status: Literal["success", "error"] = "success"

    def json(self) -> dict[str, Any]:
        if self.kind == "tool":
            return {
                "type": "tool",
                "tool_call_id": self.call_id,
                "tool_return": self.tool_return,
                "status": self.status,
            }
        return {
            "type": "approval",
            "tool_call_id": self.call_id,
            "approve": self.approve,
            "reason": self.reason,
        }


@dataclass(slots=True)
class ClientTool:
    """A tool the client runs (Letta's `client_tools` entry)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )


@dataclass(slots=True)
class PendingCall:
    call_id: str
    name: str
    arguments: str
    client: bool = False  # run by the client (a result is awaited, not a decision)
    prompt: str = ""  # the read-back a person hears ("Shall I ...?")


def readback(name: str, arguments: str) -> str:
    """A default spoken question for a call: "Shall I transfer money (amount 200, to Bob)?"."""
    try:
        args = json.loads(arguments)
    except ValueError:
        args = {}
    words = name.replace("_", " ").strip()
    if isinstance(args, dict) and args:
        detail = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in args.items())
        return f"Shall I {words} ({detail})?"
    return f"Shall I {words}?"


def pending_in(history: Sequence[MessageData]) -> tuple[MessageData, list[ToolCallData]] | None:
    """The conversation's unanswered approval request and its unanswered calls, if any."""
    request = next(
        (m for m in reversed(history) if m.role == "assistant" and m.kind == "approval_request"),
        None,
    )
    if request is None:
        return None
    at = history.index(request)
    answered = {m.tool_call_id for m in history[at + 1 :] if m.role == "tool"}
    calls = [c for c in request.tool_calls if c.id not in answered]
    return (request, calls) if calls else None


async def waiting(
    memory: Memory, agent_id: str, conversation_id: str | None
) -> tuple[MessageData, list[ToolCallData]] | None:
    """The conversation's step waiting for answers (approvals, client results), if any."""
    from agents.context import order_context

    conv_id = conversation_id or default_conversation_id(agent_id)
    return pending_in(order_context(await memory.messages.in_context(conv_id)))


def answers_json(answers: Sequence[Answer]) -> str:
    return json.dumps([a.json() for a in answers], ensure_ascii=False)


def answers_of(message: MessageData) -> list[dict[str, Any]]:
    """The stored answers of an `approval` message (Letta's `approvals`)."""
    try:
        data = json.loads(message.content)
    except ValueError:
        return []
    return [a for a in data if isinstance(a, dict)] if isinstance(data, list) else []
