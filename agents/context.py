"""What the model sees: modes, the compiled system prompt (cached by block versions), history."""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory.blocks import compile_blocks
from memory.ids import default_conversation_id
from memory.models import AgentData, MessageData
from memory.open_files import compile_directories

DEFAULT_SYSTEM = (
    "You are a helpful assistant with persistent memory. Your core memory blocks below are "
    "always visible to you; use your tools to search archival memory and past conversations "
    "when the user refers to something you do not see."
)


@dataclass(frozen=True, slots=True)
class Mode:
    """How a run differs: text, voice (agents.voice) or sleeptime (agents.sleeptime)."""

    name: str
    prompt: str = ""  # appended to the agent's system prompt
    system: str | None = None  # replaces the agent's system prompt (sleeptime)
    voice_tools: bool = False  # voice-safe tools only, search_memory first, pre_exec_msg added
    tool_names: tuple[str, ...] | None = None  # None: the agent's own tools
    history: bool = True  # include the agent's in-context messages
    persist: bool = True  # store messages in the agent's recall memory
    # the text of open files in `<directories>` (voice: names and state only; the file tools
    # read them when asked, so a spoken turn's prompt stays short)
    file_text: bool = True


TEXT = Mode("text")
# an agent asked by another agent (agents/tools/multi_agent.py): its own prompt, blocks and
# tools, no history, nothing of the question stored
CONSULT = Mode("consult", history=False, persist=False)


class PromptCache:
    """Compiled system prompts per agent, mode and caller (each caller sees their own blocks),
    rebuilt only when a block (id, version) or the agent changes; least recently used first
    out beyond `max_entries`."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._cache: OrderedDict[tuple[str, str, str | None], tuple[tuple[Any, ...], str]] = (
            OrderedDict()
        )
        self.max_entries = max_entries
        self.builds = 0

    def get(self, agent: AgentData, mode: Mode, identity_id: str | None = None) -> str:
        key = (
            agent.updated_at,
            agent.system,
            tuple((b.id, b.version) for b in agent.blocks),
            tuple((f.id, f.name, f.description, f.instructions, *f.files) for f in agent.folders),
        )
        slot = (agent.id, mode.name, identity_id)
        hit = self._cache.get(slot)
        if hit and hit[0] == key:
            self._cache.move_to_end(slot)
            return hit[1]
        self.builds += 1
        base = mode.system if mode.system is not None else (agent.system or DEFAULT_SYSTEM)
        parts = [base.strip()]
        if mode.prompt:
            parts.append(mode.prompt.strip())
        parts.append(compile_blocks(agent.blocks))
        if agent.folders:
            parts.append(
                compile_directories(agent.folders, agent.blocks, agent.metadata, mode.file_text)
            )
        text = "\n\n".join(parts)
        self._cache[slot] = (key, text)
        self._cache.move_to_end(slot)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return text

    def forget(self, agent_id: str) -> None:
        for k in [k for k in self._cache if k[0] == agent_id]:
            del self._cache[k]


def memory_metadata(agent: AgentData, conversation_id: str) -> str:
    """Letta's `<memory_metadata>` section of a text conversation's prompt: the ids a model may
    hand to tools (the agent's default conversation is `default`, as Letta names it) and when
    the prompt's parts last changed. Stable between changes, so a provider's prompt cache
    still holds."""
    changed = max([agent.updated_at, *(b.updated_at for b in agent.blocks if b.updated_at)])
    conv = "default" if conversation_id == default_conversation_id(agent.id) else conversation_id
    return (
        "<memory_metadata>\n"
        f"- AGENT_ID: {agent.id}\n"
        f"- CONVERSATION_ID: {conv}\n"
        f"- System prompt last recompiled: {changed:%Y-%m-%d %I:%M:%S %p} UTC\n"
        "</memory_metadata>"
    )


_KIND = operator.attrgetter("kind")


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def message_tokens(m: MessageData) -> int:
    return estimate_tokens(m.content) + sum(
        estimate_tokens(tc.arguments) + 8 for tc in m.tool_calls
    )


def order_context(messages: Sequence[MessageData]) -> list[MessageData]:
    """The newest summary first, then everything else in order (older summaries left out).
    Once per turn over the whole window: the common cases (no summary, one) slice in C."""
    kinds = list(map(_KIND, messages))
    count = kinds.count("summary")
    if count == 0:
        return list(messages)
    if count == 1:
        i = kinds.index("summary")
        return [messages[i], *messages[:i], *messages[i + 1 :]]
    summaries = [m for m in messages if m.kind == "summary"]
    rest = [m for m in messages if m.kind != "summary"]
    return summaries[-1:] + rest


def to_openai(messages: Sequence[MessageData]) -> list[dict[str, Any]]:
    """Chat-completions messages; tool calls without results (a cut-off turn) are dropped."""
    out: list[dict[str, Any]] = []
    append_openai(messages, {m.tool_call_id for m in messages if m.role == "tool"}, set(), out)
    return out


def append_openai(
    messages: Sequence[MessageData],
    answered: set[str | None],
    live_calls: set[str],
    out: list[dict[str, Any]],
) -> None:
    """`to_openai` of `messages` appended to `out`: `answered` holds the tool_call_ids that have
    a tool message anywhere in the whole context, `live_calls` the calls kept so far (updated)."""
    for m in messages:
        if m.role == "assistant":
            calls = [tc for tc in m.tool_calls if tc.id in answered]
            live_calls.update(tc.id for tc in calls)
            if not calls and not m.content:
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.name, "arguments": tc.arguments or "{}"},
                    }
                    for tc in calls
                ]
            out.append(msg)
        elif m.role == "tool":
            if m.tool_call_id in live_calls:
                out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.kind == "approval":  # the tool messages that follow carry the decision
            continue
        elif m.kind == "summary":
            out.append(
                {"role": "user", "content": f"[Summary of the earlier conversation]\n{m.content}"}
            )
        else:
            out.append({"role": m.role, "content": m.content})


def split_for_summary(
    messages: Sequence[MessageData], keep_tokens: int
) -> tuple[list[MessageData], list[MessageData]]:
    """(to summarize, to keep): keep the newest messages within `keep_tokens`, cutting at a
    user message so tool calls stay with their results."""
    total, cut = 0, len(messages)
    for i in range(len(messages) - 1, -1, -1):
        total += message_tokens(messages[i])
        if total > keep_tokens:
            break
        if messages[i].role == "user" and messages[i].kind != "summary":
            cut = i
    return list(messages[:cut]), list(messages[cut:])


def extractive_summary(messages: Sequence[MessageData]) -> str:
    """Local fallback: the first sentence of each user/assistant message."""
    lines = []
    for m in messages:
        if m.role in ("user", "assistant") and m.content.strip():
            first = m.content.strip().split(". ")[0][:160]
            lines.append(f"{m.role}: {first}")
    return "\n".join(lines[-60:])
