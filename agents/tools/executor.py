"""Run tool calls: argument parsing, pre_exec_msg stripping, errors returned to the model."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from agents.tools.registry import PRE_EXEC_MSG, Tool, ToolContext, ToolError

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 500  # as Letta caps a tool's error message


@dataclass(slots=True)
class Call:
    index: int
    id: str
    name: str
    raw: str = ""  # the streamed argument text
    arguments: str = "{}"  # JSON without pre_exec_msg
    pre_exec_msg: str | None = None
    parse_error: str | None = None

    def finalize(self) -> None:
        try:
            args = json.loads(self.raw) if self.raw.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            self.parse_error = f"invalid JSON arguments for {self.name}: {exc}"
            self.arguments = json.dumps({"raw": self.raw[:500]})
            return
        msg = args.pop(PRE_EXEC_MSG, None)
        self.pre_exec_msg = msg if isinstance(msg, str) and msg.strip() else None
        self.arguments = json.dumps(args)


async def execute(
    call: Call, tool: Tool | None, ctx: ToolContext, timeout_s: float
) -> tuple[bool, str]:
    """Returns (ok, result text). Never raises except CancelledError."""
    if call.parse_error:
        return False, call.parse_error
    if tool is None:
        return False, f"unknown tool '{call.name}'"
    kwargs: dict[str, Any] = json.loads(call.arguments)
    allowed = set(tool.parameters["properties"])
    unexpected = sorted(set(kwargs) - allowed)
    if unexpected:
        return False, f"{call.name} got unexpected arguments: {', '.join(unexpected)}"
    missing = [p for p in tool.parameters["required"] if p not in kwargs]
    if missing:
        return False, f"{call.name} is missing required arguments: {', '.join(missing)}"
    try:
        async with asyncio.timeout(timeout_s):
            return True, truncate_return(await tool.fn(ctx, **kwargs), tool.return_char_limit)
    except ToolError as exc:
        return False, str(exc)
    except TimeoutError:
        return False, f"{call.name} timed out after {timeout_s:.0f}s"
    except (TypeError, ValueError) as exc:
        return False, friendly_error(call.name, exc)
    except Exception as exc:  # the details are logged, not given to the model
        log.exception("tool %s failed", call.name)
        return False, friendly_error(call.name, exc, "internal error")


def truncate_return(text: str, limit: int | None) -> str:
    """A return over the tool's `return_char_limit` is cut, with Letta's note saying so."""
    if not limit or len(text) <= limit:
        return text
    return (
        f"{text[:limit]}... [NOTE: function output was truncated since it exceeded the "
        f"character limit ({len(text)} > {limit})]"
    )


def friendly_error(name: str, exc: Exception, message: str | None = None) -> str:
    """A failed call as Letta words it: `Error executing function <name>: <Type>: <message>`."""
    text = f"Error executing function {name}: {type(exc).__name__}: {message or exc}"
    return text[:MAX_ERROR_CHARS]
