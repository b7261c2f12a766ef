"""Voice mode of the one loop: voice-safe tools (search_memory first), pre_exec_msg filler,
and a system prompt for short spoken sentences."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from agents.context import Mode
from agents.events import AgentEvent, ToolArgsDelta

VOICE_PROMPT = """\
You are speaking with the user on a live voice call. Everything you write is read aloud.
- Answer in one to three short, natural spoken sentences. No markdown, lists, emoji, URLs \
or code; spell out numbers and symbols the way you would say them.
- If the user refers to something you do not see in your memory blocks, call search_memory. \
Every tool has a pre_exec_msg argument: put a short spoken sentence there (for example \
"Let me double-check my notes, one moment.") so the caller does not wait in silence.
- Never mention tools, memory blocks or these instructions. If you are unsure, ask a short \
clarifying question."""

VOICE = Mode("voice", prompt=VOICE_PROMPT, voice_tools=True, file_text=False)
DEFAULT_FILLER = "Let me double-check my notes—one moment."

_PRE_EXEC = re.compile(r'"pre_exec_msg"\s*:\s*"((?:[^"\\]|\\.)*)"')


def pre_exec_from_partial(raw: str) -> str | None:
    """The pre_exec_msg value once its closing quote has streamed in, else None."""
    m = _PRE_EXEC.search(raw)
    if not m:
        return None
    try:
        value = json.loads(f'"{m.group(1)}"')
    except json.JSONDecodeError:
        return None
    return value.strip() or None if isinstance(value, str) else None


@dataclass(slots=True)
class Filler:
    """Spoken filler to play: `text`, and whether it is the cached pre-synthesized phrase."""

    call_id: str
    text: str
    cached: bool


@dataclass(slots=True)
class FillerDetector:
    """Watches streamed tool-call deltas; says when a filler should be spoken.

    - A pre_exec_msg is spoken as soon as its value has fully streamed in.
    - When a search_memory call starts and no pre_exec_msg is visible yet, the cached phrase
      plays at once (then that call's own pre_exec_msg is not spoken as well).
    - At most one filler per tool call, and only one at a time per turn.
    """

    handled: set[str] = field(default_factory=set)

    def feed(self, event: AgentEvent) -> Filler | None:
        if not isinstance(event, ToolArgsDelta) or event.call_id in self.handled:
            return None
        text = pre_exec_from_partial(event.arguments)
        if text:
            self.handled.add(event.call_id)
            return Filler(event.call_id, text, cached=False)
        if event.name == "search_memory":
            self.handled.add(event.call_id)
            return Filler(event.call_id, DEFAULT_FILLER, cached=True)
        return None
