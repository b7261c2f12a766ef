"""Tool registry: JSON schemas from signatures and Google-style docstrings; voice_safe flag."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agents.events import RunDone
    from agents.tools.call_control import CallControl
    from agents.tools.staging import StagedMemory
    from memory.models import AgentData
    from memory.service import Memory

PRE_EXEC_MSG = "pre_exec_msg"
PRE_EXEC_SCHEMA = {
    "type": "string",
    "description": (
        "A short spoken sentence said to the caller before the tool runs, so they do not "
        "wait in silence (e.g. 'Let me double-check my notes, one moment.')."
    ),
}


class ToolError(Exception):
    """A tool failed in an expected way; the message is returned to the model."""


class AgentRunner(Protocol):
    """What the agent-to-agent tools (agents/tools/multi_agent.py) need of the loop."""

    async def consult(self, agent_id: str, text: str) -> RunDone | None:
        """Run the agent on `text` with its own prompt, blocks and tools, no history and nothing
        stored; how the run ended (None: it yielded no end)."""
        ...

    def turn_lock(self, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """The conversation's turn lock: held, no turn of it is running."""
        ...


@dataclass(slots=True)
class ToolContext:
    memory: Memory
    agent: AgentData
    actor: str = "agent"  # agent | sleeptime
    user_text: str = ""
    conversation_id: str | None = None
    identity_id: str | None = None  # the caller: searches and edits stay within their memory
    turn_id: str | None = None  # searches skip the turn being answered
    source_event_id: str | None = None
    now: datetime | None = None
    finished: bool = False  # set by memory_finish_edits
    staged: StagedMemory | None = None  # sleeptime: memory edits wait for the run's commit
    runner: AgentRunner | None = None  # for agents that ask agents (None: may not ask)
    call: CallControl | None = None  # the live call (voice turns; None: no call tools)


ToolFn = Callable[..., Awaitable[str]]


@dataclass(slots=True)
class Tool:
    name: str
    fn: ToolFn
    description: str
    parameters: dict[str, Any]
    voice_safe: bool = False
    ends_turn: bool = False
    tags: list[str] = field(default_factory=list)
    client: bool = False  # run by the caller's client (agents/approvals.py), never here
    return_char_limit: int | None = None  # a longer return is cut by the executor

    def schema(self, *, voice: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = {
            "type": "object",
            "properties": dict(self.parameters["properties"]),
            "required": list(self.parameters["required"]),
        }
        if voice:
            params["properties"][PRE_EXEC_MSG] = PRE_EXEC_SCHEMA
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


_ARG_RE = re.compile(r"^ {0,4}(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary (text before the first section) and Args descriptions of a Google docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    section, current = None, None
    for line in lines:
        stripped = line.strip()
        if stripped.endswith(":") and stripped[:-1] in ("Args", "Arguments", "Returns", "Raises"):
            section = stripped[:-1]
            continue
        if section is None:
            summary.append(stripped)
        elif section in ("Args", "Arguments"):
            m = _ARG_RE.match(line)
            if m:
                current = m.group(1)
                args[current] = m.group(2).strip()
            elif current and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(s for s in summary if s).strip(), args


def json_type(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return json_type(inner[0]) if len(inner) == 1 else {"anyOf": [json_type(a) for a in inner]}
    if origin in (list, tuple, set):
        args = typing.get_args(tp)
        return {"type": "array", "items": json_type(args[0]) if args else {}}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        return {"type": "string", "enum": list(typing.get_args(tp))}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"unsupported tool parameter type: {tp!r}")


def build_parameters(fn: ToolFn, arg_docs: dict[str, str]) -> dict[str, Any]:
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if name in ("ctx", "self"):
            continue
        schema = json_type(hints[name])
        if name in arg_docs:
            schema["description"] = arg_docs[name]
        props[name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


class ToolRegistry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(
        self, *, voice_safe: bool = False, ends_turn: bool = False, tags: list[str] | None = None
    ) -> Callable[[ToolFn], ToolFn]:
        def deco(fn: ToolFn) -> ToolFn:
            summary, arg_docs = parse_docstring(fn.__doc__ or "")
            self._tools[fn.__name__] = Tool(
                name=fn.__name__,
                fn=fn,
                description=summary,
                parameters=build_parameters(fn, arg_docs),
                voice_safe=voice_safe,
                ends_turn=ends_turn,
                tags=list(tags or []),
            )
            return fn

        return deco

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def all(self) -> list[Tool]:
        return list(self._tools.values())

    def select(
        self, names: list[str], *, voice: bool = False, extra: Sequence[Tool] = ()
    ) -> list[Tool]:
        """The agent's tools (built-ins, then `extra`, e.g. its custom tools, by name); in voice
        mode only voice-safe ones, search_memory first."""
        pool = {**{t.name: t for t in extra}, **self._tools}
        tools = [pool[n] for n in names if n in pool]
        if voice:
            tools = [t for t in tools if t.voice_safe]
            tools.sort(key=lambda t: t.name != "search_memory")
        return tools


REGISTRY = ToolRegistry()
