"""agents.compiled: the incrementally compiled context equals a from-scratch build."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from agents.compiled import Compiled, ContextCompiler
from agents.context import message_tokens, order_context, to_openai
from memory.models import MessageData, ToolCallData

_ids = itertools.count()


def msg(role: str, content: str = "", **kw: object) -> MessageData:
    return MessageData(id=f"m{next(_ids)}", agent_id="a", role=role, content=content, **kw)  # type: ignore[arg-type]


def call(call_id: str, name: str = "noop") -> MessageData:
    return msg("assistant", tool_calls=[ToolCallData(id=call_id, name=name, arguments="{}")])


def result(call_id: str, text: str = "ok") -> MessageData:
    return msg("tool", text, tool_call_id=call_id, tool_name="noop")


def assert_scratch(got: Compiled, context: Sequence[MessageData]) -> None:
    assert got.openai == to_openai(context)
    assert got.tokens == sum(message_tokens(m) for m in context)


def test_appends_extend_and_match_a_scratch_build() -> None:
    compiler = ContextCompiler()
    context: list[MessageData] = []
    steps: list[list[MessageData]] = [
        [msg("user", "hello")],
        [msg("assistant", "Hi there. How can I help?")],
        [msg("user", "note", kind="note"), msg("user", "use the tool")],
        [call("c1"), result("c1", "pong")],
        [msg("assistant", "Done.")],
        [msg("user", "two tools"), call("c2"), result("c2"), msg("assistant", "")],
    ]
    for new in steps:
        context += new
        assert_scratch(compiler.compile("a", context), context)
        # the same context again: nothing to convert, still equal
        assert_scratch(compiler.compile("a", context), context)
    assert compiler.full == 1 and compiler.extended == 2 * len(steps) - 1


def test_the_loops_list_growing_in_place_is_not_taken_for_the_compiled_one() -> None:
    compiler = ContextCompiler()
    context = [msg("user", "one")]
    compiler.compile("a", context)
    context += [msg("assistant", "two"), msg("user", "three")]  # the loop's `context +=`
    assert_scratch(compiler.compile("a", context), context)


def test_a_result_for_a_call_left_out_earlier_rebuilds() -> None:
    compiler = ContextCompiler()
    context = [msg("user", "hi"), call("late"), msg("user", "still there?")]
    first = compiler.compile("a", context)
    assert "tool_calls" not in str(first.openai)  # no result: the call is left out
    context = [*context, result("late", "finally")]
    got = compiler.compile("a", context)
    assert_scratch(got, context)
    assert got.openai[1]["tool_calls"][0]["id"] == "late"
    assert compiler.full == 2


def test_a_result_before_its_call_counts_as_in_a_scratch_build() -> None:
    compiler = ContextCompiler()
    context = [msg("user", "x"), result("early")]
    compiler.compile("a", context)
    context = [*context, call("early"), result("early", "again")]
    assert_scratch(compiler.compile("a", context), context)


def test_a_window_read_again_after_a_truncation_is_compiled_from_scratch() -> None:
    compiler = ContextCompiler()
    user, reply = msg("user", "tell me"), msg("assistant", "A long answer that was cut.")
    compiler.compile("a", [user, reply])
    # the store re-reads the window: new objects, the reply cut to what was heard
    reread = [user.model_copy(), reply.model_copy(update={"content": "A long"})]
    got = compiler.compile("a", reread)
    assert_scratch(got, reread)
    assert got.openai[-1]["content"] == "A long"
    assert compiler.full == 2


def test_a_summary_or_a_shorter_window_is_compiled_from_scratch() -> None:
    compiler = ContextCompiler()
    old = [msg("user", f"message {i}") for i in range(6)]
    compiler.compile("a", old)
    summary = msg("user", "they talked", kind="summary")
    fitted = [summary, *old[4:]]
    assert_scratch(compiler.compile("a", fitted), fitted)
    assert_scratch(compiler.compile("a", old[:2]), old[:2])
    assert compiler.full == 3


def test_keys_are_separate_and_bounded() -> None:
    compiler = ContextCompiler(max_keys=2)
    a, b, c = [msg("user", "a")], [msg("user", "b")], [msg("user", "c")]
    for key, ctx in (("a", a), ("b", b), ("c", c)):
        assert_scratch(compiler.compile(key, ctx), ctx)
    assert_scratch(compiler.compile("c", c), c)
    compiler.compile("a", a)  # forgotten (least recently used): compiled again
    assert compiler.full == 4 and compiler.extended == 1


def test_order_context_puts_the_newest_summary_first() -> None:
    a, b, c = msg("user", "a"), msg("assistant", "b"), msg("user", "c")
    s1, s2 = msg("user", "old", kind="summary"), msg("user", "new", kind="summary")
    assert order_context([a, b, c]) == [a, b, c]
    assert order_context([a, b, s2, c]) == [s2, a, b, c]
    assert order_context([s2, a]) == [s2, a]
    assert order_context([a, s1, b, s2, c]) == [s2, a, b, c]
    assert order_context([]) == []
