"""The post-call report: the call record, its transcript (what the caller and the agent said,
the agent's tool calls and their results), each turn's latencies (the `turn.metrics` figures
kept on the turn's run) and the recording's path (null when the call has none). Served by
`GET /v1/calls/{id}/report` and sent as the `data` of the `call.ended` webhook."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory.call_history import CallHistory
from memory.calls import CallData
from memory.db import Database
from memory.models import MessageData
from memory.runs import RunData, TurnMetrics

SHOWN_KINDS = ("message", "approval_request")  # not the compiled prompt, summaries or notes


def _iso(t: datetime | None) -> str | None:
    return t.isoformat() if t is not None else None


def call_json(c: CallData) -> dict[str, Any]:
    """A call record as the API shows it."""
    return {
        "id": c.id,
        "agent_id": c.agent_id,
        "direction": c.direction,
        "transport": c.transport,
        "caller": c.caller,
        "status": c.status,
        "status_history": c.history,
        "created_at": _iso(c.created_at),
        "answered_at": _iso(c.answered_at),
        "ended_at": _iso(c.ended_at),
        "end_reason": c.end_reason,
        "conversation_id": c.conversation_id,
        "vendor_call_id": c.vendor_call_id,
        "options": c.options,
        "metadata": c.metadata,
        "recording_url": f"/v1/calls/{c.id}/recording" if c.recording_path else None,
    }


def transcript_entry(m: MessageData) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": m.role, "text": m.content, "at": _iso(m.created_at)}
    if m.role == "assistant":
        entry["truncated"] = m.truncated  # cut at what the caller heard (a barge-in)
        if m.tool_calls:
            entry["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
            ]
    if m.role == "tool":
        entry |= {"tool_call_id": m.tool_call_id, "tool_name": m.tool_name}
        entry["tool_status"] = m.tool_status
    return entry


def turn_entry(run: RunData) -> dict[str, Any]:
    figures = TurnMetrics.of(run.metrics).as_dict()  # None where not measured
    return {
        "turn_id": run.id,
        "started_at": _iso(run.created_at),
        "stop_reason": run.stop_reason,
        **figures,
    }


async def call_report(
    db: Database, call: CallData, conversation_id: str | None = None
) -> dict[str, Any]:
    """The report of a call; a live call's (its record has no conversation yet: the session's
    `conversation_id` is given) holds what is stored so far."""
    messages: list[MessageData] = []
    runs: list[RunData] = []
    conversation_id = call.conversation_id or conversation_id
    if conversation_id is not None:
        history = CallHistory(db)
        since, until = call.created_at, call.ended_at
        messages = await history.messages(conversation_id, since, until)
        runs = await history.runs(conversation_id, since, until)
    return {
        "call": call_json(call),
        "transcript": [
            transcript_entry(m) for m in messages if m.kind in SHOWN_KINDS and m.role != "system"
        ],
        "turns": [turn_entry(r) for r in runs],
        "recording": call_json(call)["recording_url"],
    }
