"""Stored messages as Letta messages, shaped as Letta's v1 agent loop lists them.

One stored message can be several Letta messages (reasoning, text, the step's tool calls). Their
`otid`s are Letta's: the stored message's uuid with its low 7 bits set to the Letta message's
index within it (a tool return is index 0), so a client matches streamed and listed messages.
A step's tool calls are ONE `tool_call_message` whose `tool_calls` lists them all. With
`use_assistant_message` (Letta's default) a `send_message` call is the `assistant_message` it
says and its tool return is not listed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agents.approvals import answers_of
from agents.tools import REGISTRY
from agents.tools.custom import split_envelope
from memory.models import MessageData, ToolCallData
from voice_gateway.protocol.letta import iso

SEND_MESSAGE = "send_message"  # Letta's assistant-message tool and its text argument
SEND_MESSAGE_ARG = "message"
_INDEX_BITS = 0x7F


def otid_of(message_id: str, index: int) -> str:
    """Letta's otid of the `index`th Letta message made from stored message `message_id`."""
    try:
        n = uuid.UUID(message_id.removeprefix("message-")).int
    except ValueError:  # not a uuid id (imported history): still one otid per Letta message
        return f"{message_id}:{index}"
    return str(uuid.UUID(int=(n & ~_INDEX_BITS) | (index & _INDEX_BITS)))


def tool_return_json(content: str, tool_name: str | None) -> dict[str, Any]:
    """tool_return (+ stdout and stderr for custom tools, as Letta returns them)."""
    split = None if tool_name is None or REGISTRY.get(tool_name) else split_envelope(content)
    if split is None:
        return {"tool_return": content}
    text, stdout, stderr = split
    return {"tool_return": text, "stdout": stdout, "stderr": stderr}


def _base(m: MessageData, message_type: str, index: int) -> dict[str, Any]:
    return {
        "id": m.id,
        "date": iso(m.created_at),
        "message_type": message_type,
        "step_id": m.step_id,
        "run_id": m.turn_id,
        "otid": otid_of(m.id, index),
    }


def _call(c: ToolCallData) -> dict[str, Any]:
    return {"name": c.name, "arguments": c.arguments, "tool_call_id": c.id}


def _said(c: ToolCallData) -> str | None:
    """What a send_message call says (None: not one, or its arguments hold no text)."""
    if c.name != SEND_MESSAGE:
        return None
    try:
        args = json.loads(c.arguments or "{}")
    except ValueError:
        return None
    text = args.get(SEND_MESSAGE_ARG) if isinstance(args, dict) else None
    return text if isinstance(text, str) else None


def letta_messages(m: MessageData, use_assistant_message: bool = True) -> list[dict[str, Any]]:
    """One stored message as Letta messages."""
    if m.role == "user" and m.kind == "approval":
        return [approval_response_json(m)]
    if m.role == "user" and m.kind == "message":
        own = m.otid or otid_of(m.id, 0)  # the client's, or one of ours (`input`)
        return [{**_base(m, "user_message", 0), "otid": own, "content": m.content}]
    if m.role in ("user", "system"):
        return [{**_base(m, "system_message", 0), "content": m.content}]
    if m.role == "tool":
        if use_assistant_message and m.tool_name == SEND_MESSAGE:
            return []  # shown as the assistant message it sent
        return [
            {
                **_base(m, "tool_return_message", 0),
                **tool_return_json(m.content, m.tool_name),
                "status": m.tool_status or "success",
                "tool_call_id": m.tool_call_id,
                "name": m.tool_name,
            }
        ]
    out: list[dict[str, Any]] = []
    if m.reasoning:
        out.append({**_base(m, "reasoning_message", len(out)), "reasoning": m.reasoning})
    if m.content or m.truncated:
        msg = {
            **_base(m, "assistant_message", len(out)),
            "content": m.content,
            "truncated": m.truncated,
        }
        if m.produced is not None:
            msg["generated_content"] = m.produced  # what the model said before the cut
        out.append(msg)
    if m.kind == "approval_request" and m.tool_calls:
        # Letta's mixed step: the calls that need nothing are tool calls, listed first
        flagged = any(c.waits for c in m.tool_calls)
        waits = [c for c in m.tool_calls if c.waits or not flagged]
        _calls(m, [c for c in m.tool_calls if c not in waits], out, use_assistant_message)
        calls = [_call(c) for c in waits]
        out.append(
            {
                **_base(m, "approval_request_message", len(out)),
                "tool_call": calls[0],
                "tool_calls": calls,
            }
        )
        return out
    _calls(m, m.tool_calls, out, use_assistant_message)
    return out


def _calls(
    m: MessageData, calls: list[ToolCallData], out: list[dict[str, Any]], assistant: bool
) -> None:
    """A step's tool calls: one tool_call_message per run of calls, a send_message call (with
    `assistant`) as an assistant_message between them."""
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if run:
            msg = _base(m, "tool_call_message", len(out))
            out.append({**msg, "tool_call": run[0], "tool_calls": list(run)})
            run.clear()

    for c in calls:
        said = _said(c) if assistant else None
        if said is None:
            run.append(_call(c))
            continue
        flush()
        out.append({**_base(m, "assistant_message", len(out)), "content": said})
    flush()


def approval_response_json(m: MessageData) -> dict[str, Any]:
    """A stored answer as Letta's approval_response_message (`approve` / `reason`: the first
    decision's, as Letta's older single-decision shape)."""
    approvals = answers_of(m)
    first = next((a for a in approvals if a.get("type") == "approval"), None)
    return {
        **_base(m, "approval_response_message", 0),
        "otid": m.otid or otid_of(m.id, 0),
        "approvals": approvals,
        "approve": first.get("approve") if first else None,
        "approval_request_id": first.get("tool_call_id") if first else None,
        "reason": first.get("reason") if first else None,
    }
