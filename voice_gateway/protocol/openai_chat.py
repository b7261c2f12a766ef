"""The request of the OpenAI-compatible chat endpoint (docs/chat_completions.md), as far as the
gateway reads it: the fields it uses must have their documented types (the OpenAPI document's
`CHAT_REQUEST` says the same); every other field is accepted and ignored, as OpenAI clients
send many."""

from __future__ import annotations

from typing import Any

# OpenAI's message roles ("developer" is the newer name of "system", "function" the old tool)
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_TYPED: tuple[tuple[str, type, str], ...] = (
    ("stream", bool, "a boolean"),
    ("voice", bool, "a boolean"),
    ("user", str, "a string"),
    ("conversation_id", str, "a string"),
)


def chat_request_problem(body: dict[str, Any]) -> tuple[str, str] | None:
    """(param, message) of the first field with the wrong type, or None. `null` is taken as
    leaving a field out."""
    for name, kind, what in _TYPED:
        if body.get(name) is not None and not isinstance(body[name], kind):
            return name, f"'{name}' must be {what}"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "messages", "'messages' must be a list of messages"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            return "messages", f"messages[{i}] needs a role, one of: {', '.join(CHAT_ROLES)}"
        if not isinstance(m.get("content"), str | list | None):
            return "messages", f"messages[{i}].content must be a string or a list of parts"
    return None
