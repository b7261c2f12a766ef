"""Tool rules (Letta's): what the agent may call, in what order, and what needs a person.

Rules are data on the agent (`AgentData.tool_rules`, Letta's `tool_rules` shape, so agent
files carry them). `RuleSolver` is one run's state: the one agent loop asks it which tools to
offer, whether a call may run (else Letta's `[ToolConstraintError]` tool error with a hint),
whether a call needs an approval, and whether the run may end.

Letta's semantics: `run_first` (init) tools are the only ones allowed before any tool was called;
`constrain_child_tools`: after the tool, only its children (their `child_arg_nodes` arguments
prefilled, overriding the model's); `conditional`: after the tool, the
child its output maps to; `parent_last_tool`: the children only right after the parent;
`max_count_per_step`: at most N calls in the run; `exit_loop` (terminal): the run ends after the
tool; `continue_loop`: the run goes on after it; `required_before_exit`: the run may not end
until it was called; `requires_approval`: a person approves each call first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

HINT_PREFIX = "\n** Hint: Possible rules that were violated:\n"


class _Rule(BaseModel):
    model_config = ConfigDict(extra="ignore")
    tool_name: str = Field(min_length=1, max_length=100)
    prompt_template: str | None = Field(None, max_length=2000)

    def names(self) -> list[str]:
        return [self.tool_name]

    def default_template(self) -> str | None:
        return None

    def render(self, **extra: Any) -> str | None:
        template = self.prompt_template or self.default_template()
        return render(template, {**self.model_dump(), **extra}) if template else None


class InitRule(_Rule):
    type: Literal["run_first"] = "run_first"
    args: dict[str, Any] | None = None


class TerminalRule(_Rule):
    type: Literal["exit_loop"] = "exit_loop"

    def default_template(self) -> str:
        return (
            "<tool_rule>\n{{ tool_name }} ends your response (yields control) when called\n"
            "</tool_rule>"
        )


class ContinueRule(_Rule):
    type: Literal["continue_loop"] = "continue_loop"

    def default_template(self) -> str:
        return (
            "<tool_rule>\n{{ tool_name }} requires continuing your response when called\n"
            "</tool_rule>"
        )


class ArgNode(BaseModel):
    """Letta's ToolCallNode: a child tool and arguments prefilled into its call."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=100)
    args: dict[str, Any] | None = None


class ChildRule(_Rule):
    type: Literal["constrain_child_tools"] = "constrain_child_tools"
    children: list[str] = Field(min_length=1)
    child_arg_nodes: list[ArgNode] | None = None

    @model_validator(mode="after")
    def _nodes_are_children(self) -> ChildRule:
        strays = [n.name for n in self.child_arg_nodes or [] if n.name not in self.children]
        if strays:
            raise ValueError(f"child_arg_nodes name tools that are not children: {strays}")
        return self

    def names(self) -> list[str]:
        return [self.tool_name, *self.children]

    def child_args(self, name: str) -> dict[str, Any] | None:
        return next((n.args for n in self.child_arg_nodes or [] if n.name == name), None)

    def default_template(self) -> str:
        return (
            "<tool_rule>\nAfter using {{ tool_name }}, you must use one of these tools: "
            "{{ children }}\n</tool_rule>"
        )


class ParentRule(_Rule):
    type: Literal["parent_last_tool"] = "parent_last_tool"
    children: list[str] = Field(min_length=1)

    def names(self) -> list[str]:
        return [self.tool_name, *self.children]

    def default_template(self) -> str:
        return "<tool_rule>\n{{ children }} can only be used after {{ tool_name }}\n</tool_rule>"


class ConditionalRule(_Rule):
    type: Literal["conditional"] = "conditional"
    child_output_mapping: dict[str, str] = Field(min_length=1)
    default_child: str | None = None
    require_output_mapping: bool = False

    def names(self) -> list[str]:
        extra = [self.default_child] if self.default_child else []
        return [self.tool_name, *self.child_output_mapping.values(), *extra]

    def default_template(self) -> str:
        return (
            "<tool_rule>\n{{ tool_name }} will determine which tool to use next based on its "
            "output\n</tool_rule>"
        )

    def next_tools(self, output: str, available: set[str]) -> set[str]:
        value = _output_value(output)
        for key, child in self.child_output_mapping.items():
            if value is not None and _matches(value, key):
                return {child}
        if self.require_output_mapping:
            return set()
        return {self.default_child} if self.default_child else available


class MaxCountRule(_Rule):
    type: Literal["max_count_per_step"] = "max_count_per_step"
    max_count_limit: int = Field(ge=1, le=1000)

    def default_template(self) -> str:
        return (
            "<tool_rule>\n{{ tool_name }}: max {{ max_count_limit }} use(s) per response\n"
            "</tool_rule>"
        )


class RequiredBeforeExitRule(_Rule):
    type: Literal["required_before_exit"] = "required_before_exit"

    def default_template(self) -> str:
        return (
            "<tool_rule>{{ tool_name }} must be called before ending the conversation</tool_rule>"
        )


class ApprovalRule(_Rule):
    """`prompt_template` here is the read-back a person hears or sees, with the call's
    arguments as variables (e.g. "Shall I transfer {{ amount }} euros to {{ to }}?")."""

    type: Literal["requires_approval"] = "requires_approval"


ToolRule = Annotated[
    InitRule
    | TerminalRule
    | ContinueRule
    | ChildRule
    | ParentRule
    | ConditionalRule
    | MaxCountRule
    | RequiredBeforeExitRule
    | ApprovalRule,
    Field(discriminator="type"),
]
RULES: TypeAdapter[list[ToolRule]] = TypeAdapter(list[ToolRule])

_VAR = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def render(template: str, values: dict[str, Any]) -> str:
    """`{{ name }}` substitution (lists joined with ', '); unknown names stay as they are."""

    def one(m: re.Match[str]) -> str:
        v = values.get(m.group(1))
        if v is None:
            return m.group(0)
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    return _VAR.sub(one, template)


def parse_rules(data: Iterable[Any]) -> list[ToolRule]:
    """Rules from their JSON (raises pydantic.ValidationError)."""
    return RULES.validate_python(list(data))


def dump_rules(rules: Iterable[ToolRule]) -> list[dict[str, Any]]:
    return [r.model_dump(exclude_none=True) for r in rules]


def unknown_tools(rules: Iterable[ToolRule], known: set[str]) -> list[str]:
    return sorted({n for r in rules for n in r.names() if n not in known})


def _output_value(output: str) -> str | None:
    try:
        body = json.loads(output)
    except ValueError:
        return output.strip()
    if isinstance(body, dict):  # Letta's {"message": ...}; ours {"func_return": ...}
        for key in ("message", "func_return"):
            if key in body:
                return str(body[key]).strip()
        return None
    return str(body).strip() if not isinstance(body, list) else None


def _matches(value: str, key: str) -> bool:
    return value.lower() == key.lower() if key.lower() in ("true", "false") else value == key


class RuleSolver:
    """One run's rule state: the tools called so far (in order) and the last one's output."""

    def __init__(self, rules: Iterable[ToolRule]) -> None:
        self.rules = list(rules)
        self.history: list[str] = []
        self.last_output: str = ""

    def _of(self, kind: type[_Rule]) -> list[Any]:
        return [r for r in self.rules if isinstance(r, kind)]

    def allowed(self, available: set[str]) -> set[str]:
        """The tools the model may call next (Letta's get_allowed_tool_names)."""
        if not self.history:
            inits = {r.tool_name for r in self._of(InitRule)}
            if inits:
                return inits & available
            parents = {c for r in self._of(ParentRule) for c in r.children}
            allowed = available - parents
        else:
            last = self.history[-1]
            allowed = set(available)
            for r in self._of(ChildRule):
                if r.tool_name == last:
                    allowed &= set(r.children)
            for r in self._of(ParentRule):
                allowed &= set(r.children) if r.tool_name == last else available - set(r.children)
            for r in self._of(ConditionalRule):
                if r.tool_name == last:
                    allowed &= r.next_tools(self.last_output, available)
        for r in self._of(MaxCountRule):
            if self.history.count(r.tool_name) >= r.max_count_limit:
                allowed.discard(r.tool_name)
        return allowed

    def violation(self, name: str, available: set[str]) -> str | None:
        """Letta's rule-violation tool error for calling `name` now, None if allowed."""
        allowed = self.allowed(available)
        if name in allowed or name not in available:
            return None
        previous = self.history[-1] if self.history else None
        hints = [
            h
            for r in self.rules
            if not isinstance(r, ApprovalRule | RequiredBeforeExitRule)
            and (r.tool_name == name or r.tool_name == previous)
            and (h := r.render()) is not None
        ]
        hint = HINT_PREFIX + "\n".join(f"\t- {h}" for h in hints) if hints else ""
        valid = sorted(allowed)
        return f"[ToolConstraintError] Cannot call {name}, valid tools include: {valid}.{hint}"

    def called(self, name: str) -> None:
        """`name` was called (or is about to be, in this step); set `last_output` after."""
        self.history.append(name)

    def init_args(self, name: str) -> dict[str, Any] | None:
        """Arguments the rules prefill into a call of `name` now (Letta's): an init rule's for
        the first call, a child rule's `child_arg_nodes` right after its parent tool."""
        if not self.history:
            return next(
                (r.args for r in self._of(InitRule) if r.tool_name == name and r.args), None
            )
        last = self.history[-1]
        for r in self._of(ChildRule):
            if r.tool_name == last and (args := r.child_args(name)):
                return dict(args)
        return None

    def is_terminal(self, name: str) -> bool:
        return any(r.tool_name == name for r in self._of(TerminalRule))

    def is_continue(self, name: str) -> bool:
        return any(r.tool_name == name for r in self._of(ContinueRule))

    def needs_approval(self, name: str) -> bool:
        return any(r.tool_name == name for r in self._of(ApprovalRule))

    def approval_prompt(self, name: str, arguments: dict[str, Any]) -> str | None:
        rule = next((r for r in self._of(ApprovalRule) if r.tool_name == name), None)
        return rule.render(**arguments) if rule is not None and rule.prompt_template else None

    def uncalled_required(self, available: set[str]) -> list[str]:
        names = {r.tool_name for r in self._of(RequiredBeforeExitRule)} & available
        return sorted(names - set(self.history))

    def prompt_block(self) -> str | None:
        """The rules for the system prompt (Letta's `tool_usage_rules` block)."""
        parts = [
            p
            for r in self.rules
            if not isinstance(r, ApprovalRule) and (p := r.render()) is not None
        ]
        return "\n".join(parts) if parts else None
