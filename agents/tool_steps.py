"""The loop's tool-call decisions: which calls break a rule, which wait for a person or a
client, and how an answer runs (or refuses) a waiting call. Used only by agents/loop.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agents.approvals import (
    DENIED,
    NO_ANSWER,
    NO_RESULT,
    NOT_RUN,
    Answer,
    ClientTool,
    PendingCall,
    answers_json,
)
from agents.approvals import readback as default_readback
from agents.events import ToolResult
from agents.tools.executor import Call, execute
from agents.tools.registry import Tool, ToolContext, ToolError
from agents.tools.rules import RuleSolver, parse_rules
from memory.models import AgentData, MessageData, ToolCallData

log = logging.getLogger(__name__)
REQUIRED_NOTE = (
    "[system] You cannot end your response yet: call {names} first (required before exit)."
)


def rules_of(agent: AgentData) -> RuleSolver:
    """The agent's rules as a run's solver (rules are validated when stored; a rule that no
    longer parses is skipped and logged, never a failed turn)."""
    try:
        return RuleSolver(parse_rules(agent.tool_rules))
    except ValueError:
        log.warning("agent %s: invalid tool_rules ignored", agent.id)
        return RuleSolver([])


def with_client_tools(tools: list[Tool], clients: list[ClientTool]) -> list[Tool]:
    """The run's tools with the request's client tools; a client tool named as one of the
    agent's overrides it for this run (Letta's: the client runs it)."""
    mine = {c.name for c in clients}
    return [t for t in tools if t.name not in mine] + [client_tool(c) for c in clients]


def client_tool(spec: ClientTool) -> Tool:
    """A Tool the loop never runs: a call of it waits for the client's result."""

    async def never(ctx: ToolContext, **kwargs: Any) -> str:
        raise ToolError(f"{spec.name} runs in the client")

    params = spec.parameters or {}
    return Tool(
        name=spec.name,
        fn=never,
        description=spec.description,
        parameters={
            "type": "object",
            "properties": dict(params.get("properties") or {}),
            "required": list(params.get("required") or []),
        },
        voice_safe=True,
        client=True,
    )


@dataclass(slots=True)
class Plan:
    """A step's calls sorted: rule violations (error results), calls that wait, the rest.

    A mixed step (some calls wait, others need nothing), as Letta does it: nothing of the step
    runs now; the calls that need nothing are shown as called (tool_call_message) next to the
    approval request of the ones that wait, and run when the answer comes, whatever it says,
    their results given to the model with the answered ones before it goes on. A run that
    stores the answers and stops without the model (a call that hung up) runs none of them."""

    violations: dict[str, str]
    pending: list[PendingCall]
    run_now: list[Call]

    @property
    def waiting(self) -> set[str]:
        return {p.call_id for p in self.pending}

    def mark_waiting(self, calls: list[ToolCallData]) -> Literal["approval_request"]:
        """Flag the stored step's calls that wait; the step's message kind."""
        ids = self.waiting
        for c in calls:
            c.waits = c.id in ids
        return "approval_request"


def plan(calls: Sequence[Call], solver: RuleSolver, by_name: dict[str, Tool]) -> Plan:
    available = set(by_name)
    out = Plan({}, [], [])
    for call in calls:
        broken = solver.violation(call.name, available)
        if broken is None and call.parse_error is None:
            prefill = solver.init_args(call.name)
            if prefill:  # an init or child rule's arguments override the model's
                broken = _prefill(call, by_name.get(call.name), prefill)
        if broken is not None:
            out.violations[call.id] = broken
            continue
        solver.called(call.name)
        tool = by_name.get(call.name)
        if (
            tool is not None
            and call.parse_error is None
            and (tool.client or solver.needs_approval(call.name))
        ):
            args = json.loads(call.arguments)
            prompt = solver.approval_prompt(call.name, args) or default_readback(
                call.name, call.arguments
            )
            out.pending.append(PendingCall(call.id, call.name, call.arguments, tool.client, prompt))
        else:
            out.run_now.append(call)
    return out


def _prefill(call: Call, tool: Tool | None, prefill: dict[str, Any]) -> str | None:
    """Merge a rule's prefilled arguments into the call (Letta's: the rule's win); an argument
    the tool does not take is an error for the model, and the call does not run."""
    props = (tool.parameters.get("properties") or {}) if tool is not None else {}
    unknown = [k for k in prefill if k not in props]
    if unknown:
        names = ", ".join(f"'{k}'" for k in unknown)
        return (
            f"Invalid prefilled tool arguments from tool rules: unknown argument(s) {names} "
            f"for tool '{call.name}'."
        )
    call.arguments = json.dumps({**json.loads(call.arguments), **prefill})
    return None


async def answer_calls(
    calls: Sequence[ToolCallData],
    answers: dict[str, Answer],
    solver: RuleSolver,
    by_name: dict[str, Tool],
    ctx: ToolContext,
    timeout_s: float,
    stop: bool = False,
) -> list[tuple[ToolCallData, bool, str]]:
    """Results of a waiting step's calls: a client's result as given, an approved call run, a
    denied one refused with Letta's words. An unanswered call that needs an answer is refused;
    one that needs none (it only waited with the others) runs, unless the run stops (`stop`)
    without giving the model the results: then nothing runs."""
    out: list[tuple[ToolCallData, bool, str]] = []
    for c in calls:
        a = answers.get(c.id)
        tool = by_name.get(c.name)
        needs = tool is None or tool.client or solver.needs_approval(c.name)
        if a is not None and a.kind == "tool":
            out.append((c, a.status == "success", a.tool_return))
        elif a is None and not needs and stop:
            out.append((c, False, NOT_RUN))
        elif (a is not None and a.approve) or (a is None and not needs):
            call = Call(0, c.id, c.name, c.arguments)
            call.finalize()
            ok, result = await execute(call, tool, ctx, timeout_s)
            out.append((c, ok, result))
        elif a is not None:
            out.append((c, False, DENIED.format(reason=a.reason or "none given")))
        elif tool is not None and tool.client:
            out.append((c, False, NO_RESULT))
        else:
            out.append((c, False, DENIED.format(reason=NO_ANSWER)))
        solver.called(c.name)
        solver.last_output = out[-1][2]
    return out


def ends_run(tool: Tool | None, solver: RuleSolver) -> bool:
    """A successful call of `tool` ends the run: a terminal rule, or a tool that ends the turn
    unless a continue rule says otherwise."""
    if tool is None:
        return False
    return solver.is_terminal(tool.name) or (tool.ends_turn and not solver.is_continue(tool.name))


def offered(tools: list[Tool], solver: RuleSolver) -> list[Tool]:
    """The tools the model is offered this step: those the rules allow now."""
    if not solver.rules:
        return tools
    allowed = solver.allowed({t.name for t in tools})
    return [t for t in tools if t.name in allowed]


def tool_message(
    new: Callable[..., MessageData],
    call_id: str,
    name: str,
    ok: bool,
    result: str,
    step_id: str | None,
) -> MessageData:
    return new(
        "tool",
        content=result,
        tool_call_id=call_id,
        tool_name=name,
        tool_status="success" if ok else "error",
        step_id=step_id,
    )


async def answer_waiting(
    waiting: tuple[MessageData, list[ToolCallData]],
    given: list[Answer] | None,
    solver: RuleSolver,
    by_name: dict[str, Tool],
    ctx: ToolContext,
    timeout_s: float,
    new: Callable[..., MessageData],
    stop: bool = False,
) -> tuple[list[MessageData], list[ToolResult], bool]:
    """The messages (the answers, then one result per waiting call), their events, and
    whether a call that ran ends the run."""
    request, calls = waiting
    msgs = [new("user", content=answers_json(given), kind="approval")] if given is not None else []
    answers = {a.call_id: a for a in given or []}
    results = await answer_calls(calls, answers, solver, by_name, ctx, timeout_s, stop)
    events = []
    for c, ok, result in results:
        msg = tool_message(new, c.id, c.name, ok, result, request.step_id)
        msgs.append(msg)
        events.append(ToolResult(msg.id, c.id, c.name, ok, result))
    ends = any(ok and ends_run(by_name.get(c.name), solver) for c, ok, _ in results)
    return msgs, events, ends
