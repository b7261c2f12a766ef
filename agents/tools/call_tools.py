"""Call control tools: `end_call`, `transfer_call` and `send_dtmf` end, transfer or dial out
of the live call through its `CallControl` (agents/tools/call_control.py).

They exist only on a call: text turns and sleeptime are never offered them
(`with_call_tools`). A transfer goes to a NAME from the agent's operator-set
`transfer_targets`, never to a number the model writes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from agents.tools.call_control import CallControl, CallEnding, TransferMode
from agents.tools.registry import REGISTRY, Tool, ToolContext, ToolError
from memory.models import AgentData

CALL_TOOLS = ("end_call", "transfer_call", "send_dtmf")
DTMF_DIGITS = re.compile(r"^[0-9*#wW]{1,64}$")  # w: a half-second pause, W: a second
TARGET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")
DESTINATION = re.compile(r"^(\+[1-9][0-9]{6,14}|sip:[^\s<>\"]{3,250})$")  # E.164 or sip: URI
MAX_TARGETS = 50


def call_tools(agent: AgentData) -> list[Tool]:
    """The call tools a call of `agent` is offered: `agent.call_tools` (None: all of them),
    `transfer_call` only when the agent has transfer targets."""
    names: Sequence[str] = CALL_TOOLS if agent.call_tools is None else agent.call_tools
    tools = [t for n in CALL_TOOLS if n in names and (t := REGISTRY.get(n)) is not None]
    return [
        _with_targets(t, sorted(agent.transfer_targets)) if t.name == "transfer_call" else t
        for t in tools
        if t.name != "transfer_call" or agent.transfer_targets
    ]


def _with_targets(tool: Tool, names: list[str]) -> Tool:
    """`transfer_call` offering the agent's target names (an enum; never their numbers)."""
    props = dict(tool.parameters["properties"])
    props["target"] = {**props["target"], "enum": names}
    return replace(
        tool,
        description=f"{tool.description} Targets: {', '.join(names)}.",
        parameters={**tool.parameters, "properties": props},
    )


def _call(ctx: ToolContext) -> CallControl:
    if ctx.call is None:
        raise ToolError("there is no call to control in this conversation")
    return ctx.call


@REGISTRY.register(voice_safe=True, ends_turn=True, tags=["call_control"])
async def end_call(ctx: ToolContext, reason: str) -> str:
    """Hang up the call once your goodbye has been heard. Say goodbye in the same reply
    (before calling this); nothing you say after it is heard.

    Args:
        reason: Why the call ends, in a few words (e.g. "the caller said goodbye").
    """
    try:
        _call(ctx).end_after_reply(reason[:200])
    except CallEnding as exc:
        raise ToolError("the call is already ending") from exc
    return "The call ends after your goodbye has been played."


@REGISTRY.register(voice_safe=True, ends_turn=True, tags=["call_control"])
async def transfer_call(
    ctx: ToolContext, target: str, mode: TransferMode = "cold", summary: str = ""
) -> str:
    """Transfer the caller to a person or team by name. Tell the caller first (in the same
    reply) that you are transferring them; that announcement is played before the transfer.

    Args:
        target: The name of the transfer target (one of the names listed).
        mode: "cold" hands the caller over at once; "warm" tells the person the summary first.
        summary: One or two sentences about the caller's request, for the person taking over.
    """
    call = _call(ctx)
    targets = ctx.agent.transfer_targets
    destination = targets.get(target)
    if destination is None:
        names = ", ".join(sorted(targets)) or "none"
        raise ToolError(f"unknown transfer target {target[:80]!r}; the targets are: {names}")
    if mode not in ("cold", "warm"):
        raise ToolError('mode must be "cold" or "warm"')
    return await call.transfer(target, destination, mode, summary[:1000])


@REGISTRY.register(voice_safe=True, tags=["call_control"])
async def send_dtmf(ctx: ToolContext, digits: str) -> str:
    """Press keys on the phone keypad (touch tones), e.g. to get through a phone menu.

    Args:
        digits: The keys, from 0-9 * #; "w" waits half a second, "W" a second.
    """
    call = _call(ctx)
    if not DTMF_DIGITS.match(digits):
        raise ToolError("digits may only hold 0-9, *, #, w and W (1 to 64 of them)")
    await call.send_dtmf(digits)
    return f"Sent the tones {digits}."


def with_call_tools(tools: list[Tool], agent: AgentData, call: CallControl | None) -> list[Tool]:
    """A run's tools with the call tools of its call (`call_tools`); without a call (text,
    sleeptime) none of them, even if the agent lists them."""
    kept = [t for t in tools if t.name not in CALL_TOOLS]
    return kept if call is None else kept + call_tools(agent)


def check_targets(targets: dict[str, str]) -> dict[str, str]:
    """An agent's `transfer_targets` as an operator may set them (ValueError: why not)."""
    if len(targets) > MAX_TARGETS:
        raise ValueError(f"at most {MAX_TARGETS} transfer targets")
    for name, destination in targets.items():
        if not TARGET_NAME.match(name):
            raise ValueError(
                f"target name {name[:80]!r}: 1-64 letters, digits, spaces, '_', '.', '-'"
            )
        if not DESTINATION.match(destination):
            raise ValueError(
                f"target {name!r}: an E.164 number (+14155550100) or a sip: URI is required"
            )
    return targets


def check_call_tools(names: list[str] | None) -> list[str] | None:
    """An agent's `call_tools` (None: all of them)."""
    unknown = [n for n in names or [] if n not in CALL_TOOLS]
    if unknown:
        raise ValueError(f"unknown call tools {unknown[:5]}; they are {', '.join(CALL_TOOLS)}")
    return None if names is None else list(dict.fromkeys(names))
