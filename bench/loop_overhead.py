"""Agent-loop overhead per step, with an instant LLM (a subclass of our LLMProvider base).

A step is: compile the system prompt (cached by block versions), build the request, stream the
model's chunks, accumulate tool-call deltas, run the tool, persist the step's messages in one
SQLite transaction (WAL). The LLM answers instantly, so what is measured is the loop itself.

Three turn shapes are timed end to end (`AgentLoop.run` consumed to the end):
- text: one step, a streamed text reply;
- tool: two steps, a streamed `noop` tool call then a text reply;
- baseline: the instant provider's stream consumed alone for the same chunks (the floor).
Overhead per step = (turn time - baseline time) / steps. Target: p50 < 2 ms.
Run on SQLite (the embedded default), on PostgreSQL when a server answers, and once with
persistence off (the loop's own CPU work: prompt, request, event dispatch, tool execution).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from _common import Timer, emit, parser, postgres_admin_url, ratio, summary, temp_postgres

from agents.context import TEXT, Mode
from agents.events import RunDone
from agents.llm import LLMChunk, LLMProvider, LLMRegistry, LLMRequest, ToolCallDelta, Usage
from agents.loop import AgentLoop, TurnInput
from agents.tools.registry import ToolContext, ToolRegistry
from memory.ids import default_conversation_id
from memory.models import BlockSpec
from memory.service import Memory

TOOLS = ToolRegistry()
NO_PERSIST = Mode("bench", persist=False)  # the loop's own work: no database writes


@TOOLS.register(voice_safe=True)
async def noop(ctx: ToolContext, text: str) -> str:
    """Return the text unchanged.

    Args:
        text: anything.
    """
    return text


REPLY = "Sure, here is a short answer with a handful of words in it for the bench."


class InstantLLM(LLMProvider):
    """Answers at once: a tool call on the first step of a 'tool' turn, text otherwise."""

    name = "instant"

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        last = req.messages[-1]
        wants_tool = last["role"] == "user" and "tool" in str(last.get("content"))
        if wants_tool:
            args = json.dumps({"text": "ping"})
            yield LLMChunk(tool_calls=[ToolCallDelta(0, "call_1", "noop", "")])
            for i in range(0, len(args), 6):
                yield LLMChunk(tool_calls=[ToolCallDelta(0, arguments=args[i : i + 6])])
        else:
            for word in REPLY.split(" "):
                yield LLMChunk(text=word + " ")
        yield LLMChunk(usage=Usage(10, 10), finish_reason="stop")


async def consume(provider: LLMProvider, text: str) -> None:
    req = LLMRequest(model="x", messages=[{"role": "user", "content": text}])
    async for _ in provider.stream(req):
        pass


async def run_backend(url: str, turns: int, persist: bool = True) -> dict[str, object]:
    memory = await Memory.open(url)
    llms = LLMRegistry()
    provider = InstantLLM()
    llms.overrides["openai"] = provider
    loop = AgentLoop(memory, llms, tools=TOOLS)
    agent = await memory.agents.create(
        user_id=None,
        name="bench",
        system="",
        model="openai/instant",
        embedding="local/all-minilm-l6-v2",
        tool_names=["noop"],
        blocks=[
            BlockSpec(label="persona", value="A bench agent."),
            BlockSpec(label="human", value="Name: Bench"),
        ],
    )
    mode = TEXT if persist else NO_PERSIST
    samples: dict[str, list[float]] = {"text": [], "tool": [], "baseline": []}
    steps: dict[str, int] = {}
    for i in range(turns):
        for shape, text in (("text", "hello"), ("tool", "please use the tool")):
            with Timer() as t:
                async for ev in loop.run(agent.id, TurnInput(text=f"{text} {i}", mode=mode)):
                    if isinstance(ev, RunDone):
                        steps[shape] = ev.steps
            samples[shape].append(t.ms)
        with Timer() as t:
            await consume(provider, "hello")
            await consume(provider, "please use the tool")
            await consume(provider, "again")
        samples["baseline"].append(t.ms)
    in_context = len(await memory.messages.in_context(default_conversation_id(agent.id)))
    await memory.close()
    per_step = [
        (a + b - c) / (steps["text"] + steps["tool"])
        for a, b, c in zip(samples["text"], samples["tool"], samples["baseline"], strict=True)
    ]
    return {
        "steps": steps,
        "messages_in_context_at_end": in_context,
        "text_turn": summary(samples["text"]),
        "tool_turn": summary(samples["tool"]),
        "llm_stream_baseline_for_both_turns": summary(samples["baseline"]),
        "overhead_per_step": summary(per_step),
    }


async def main() -> None:
    args = parser(__doc__ or "").parse_args()
    turns = 60 if args.quick else 500
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        results["sqlite"] = await run_backend(url, turns)
        results["no_persistence"] = await run_backend(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench2.db'}", turns, persist=False
        )
    admin = postgres_admin_url()
    if admin:
        async with temp_postgres(admin) as pg:
            results["postgresql"] = await run_backend(pg, turns)
    sqlite_step = results["sqlite"]["overhead_per_step"]  # type: ignore[index]
    cpu_step = results["no_persistence"]["overhead_per_step"]  # type: ignore[index]
    emit(
        "loop_overhead",
        {
            "quick": args.quick,
            "turns_each": turns,
            **results,
            "p50_ratio_sqlite_step_vs_no_persistence": ratio(
                sqlite_step["p50_ms"], cpu_step["p50_ms"]
            ),
            "target": {
                "p50_ms_per_step_lt": 2,
                "met_sqlite": bool(sqlite_step["p50_ms"] < 2),
                "met_postgresql": bool(
                    admin and results["postgresql"]["overhead_per_step"]["p50_ms"] < 2  # type: ignore[index]
                ),
            },
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
