"""The agent's greeting when a call connects, with the caller's name when memory has it."""

from __future__ import annotations

import re

from memory.models import AgentData
from memory.service import Memory

_NAME_LINE = re.compile(r"^\s*name\s*:\s*(.+?)\s*$", re.I | re.M)
_NAME_TEXT = re.compile(r"\b(?:name is|called)\s+([A-Z][\w'-]*)")
_GREETING_WORD = re.compile(
    r"^(hi|hello|hey|welcome back|good (?:morning|afternoon|evening))\b", re.I
)


def known_name(agent: AgentData) -> str | None:
    human = next((b.value for b in agent.blocks if b.label == "human"), "")
    m = _NAME_LINE.search(human) or _NAME_TEXT.search(human)
    return m.group(1).strip() if m else None


def personalize(template: str, name: str | None) -> str:
    """`{name}` is replaced (or dropped when unknown); otherwise the name follows the
    opening greeting word, e.g. "Hello! ..." -> "Hello Alice! ..."."""
    if "{name}" in template:
        text = template.replace("{name}", name or "")
        return (
            re.sub(r"\s+([,!.?])", r"\1", re.sub(r"\s{2,}", " ", text)).replace(" ,", ",").strip()
        )
    if not name:
        return template
    m = _GREETING_WORD.match(template)
    if m:
        return f"{template[: m.end()]} {name}{template[m.end() :]}"
    return f"Hi {name}! {template}"


async def render_greeting(memory: Memory, agent: AgentData, identity_id: str | None = None) -> str:
    """The greeting with the name from the caller's own memory (without a caller: the
    agent's own blocks, single-user mode)."""
    fresh = await memory.agents.get(agent.id, identity_id=identity_id)
    return personalize(fresh.greeting or "", known_name(fresh))
