"""The context window as the model sees it, compiled incrementally.

Every step sends the whole in-context history, converted to chat-completions messages, and the
summarizer counts its tokens. Converting and counting a 400-message window took ~0.6 ms per
step, growing with the window. Consecutive steps and turns of an agent see the same window with
messages added at the end (the loop's own, kept by `memory.messages.ContextCache` as the same
objects), so the last compilation per agent is kept and extended by the new messages only.

A context is an extension of the last one when it starts with the very same message objects
(identity, not equality: a window re-read from the database after a truncation or a summary
has new objects and is compiled from scratch). This relies on a message never being changed in
place once it is in a context: the loop streams into a message before adding it, and the store
changes messages only in the database (then drops its cached window).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.context import append_openai, message_tokens
from memory.models import MessageData


@dataclass(slots=True)
class Compiled:
    """`to_openai(messages)` and the sum of `message_tokens` over them. Valid until the next
    `compile` of the same key (it may be extended then); copy what you keep."""

    messages: list[MessageData] = field(default_factory=list)  # a private copy
    openai: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0
    answered: set[str | None] = field(default_factory=set)  # ids that have a tool message
    live: set[str] = field(default_factory=set)  # calls kept in `openai`
    dropped: set[str] = field(default_factory=set)  # calls left out: no result (yet)


class ContextCompiler:
    """Per key (an agent id), the last context compiled, extended when the next one starts with
    it. Bounded: the least recently used keys are forgotten."""

    def __init__(self, max_keys: int = 512) -> None:
        self.max_keys = max_keys
        self._last: OrderedDict[str, Compiled] = OrderedDict()
        self.full = self.extended = 0  # how each compile went (tests, benchmarks)

    def compile(self, key: str, context: Sequence[MessageData]) -> Compiled:
        hit = self._last.get(key)
        done = _extend(hit, context) if hit is not None else None
        if done is None:
            self.full += 1
            done = _extend(Compiled(), context)
            assert done is not None  # nothing to contradict in an empty start
        else:
            self.extended += 1
        self._last[key] = done
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return done

    def forget(self, key: str) -> None:
        self._last.pop(key, None)


def _extend(base: Compiled, context: Sequence[MessageData]) -> Compiled | None:
    """`base` plus the messages of `context` after it, or None when `context` does not start
    with base's messages or answers a call that base left out (its conversion would change)."""
    n = len(base.messages)
    if n > len(context) or not all(map(operator.is_, base.messages, context)):
        return None
    if n == len(context):
        return base
    tail = context[n:]
    answers = {m.tool_call_id for m in tail if m.role == "tool"}
    if not answers.isdisjoint(base.dropped):
        return None
    answered = base.answered | answers
    live, out = set(base.live), list(base.openai)
    append_openai(tail, answered, live, out)
    dropped = set(base.dropped)
    for m in tail:
        dropped.update(tc.id for tc in m.tool_calls if tc.id not in answered)
    return Compiled(
        messages=[*base.messages, *tail],
        openai=out,
        tokens=base.tokens + sum(message_tokens(m) for m in tail),
        answered=answered,
        live=live,
        dropped=dropped,
    )
