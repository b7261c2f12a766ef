"""Agents that ask agents (Letta's multi-agent tools). The asked agent answers in a consult
run of the one loop: its own system prompt, blocks and tools, no conversation history, and
nothing of the question stored in its recall memory, so one caller's words never reach another
caller's context through a shared specialist. Only agents of the same owner can be asked; an
asked agent cannot ask further (no loops); each answer has a time-out. Voice-safe: the
`pre_exec_msg` filler plays while the caller waits."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents.tools.registry import REGISTRY, ToolContext, ToolError

ASK_TIMEOUT_S = 20.0
MAX_AGENTS = 8
PREFIX = "[Incoming message from agent with ID '{id}' - your response will be delivered to it]"


async def _other(ctx: ToolContext, agent_id: str) -> Any:
    from memory.models import NotFound

    if agent_id == ctx.agent.id:
        raise ToolError("an agent cannot send a message to itself")
    try:
        other = await ctx.memory.agents.get(agent_id)
    except NotFound as exc:
        raise ToolError(f"agent {agent_id} not found") from exc
    if other.user_id != ctx.agent.user_id:
        raise ToolError(f"agent {agent_id} not found")
    return other


async def ask(ctx: ToolContext, agent_id: str, message: str) -> str:
    """Run `agent_id` on the message (a consult run); its reply text."""
    if ctx.runner is None:
        raise ToolError("an agent that was asked by another agent cannot ask further")
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S):
            done = await ctx.runner.consult(agent_id, f"{PREFIX.format(id=ctx.agent.id)} {message}")
    except TimeoutError as exc:
        raise ToolError(f"agent {agent_id} did not answer within {ASK_TIMEOUT_S:g}s") from exc
    if done is None or done.stop_reason not in ("end_turn", "max_steps"):
        reason = done.error if done is not None else "no answer"
        raise ToolError(f"agent {agent_id} could not answer: {reason}")
    return done.agent_text


@REGISTRY.register(voice_safe=True)
async def send_message_to_agent_and_wait_for_reply(
    ctx: ToolContext, message: str, other_agent_id: str
) -> str:
    """Sends a message to another agent and waits for its reply.

    Args:
        message: The message to send (in full sentences).
        other_agent_id: The id of the agent to ask.
    """
    await _other(ctx, other_agent_id)
    return await ask(ctx, other_agent_id, message)


@REGISTRY.register(voice_safe=True)
async def send_message_to_agents_matching_tags(
    ctx: ToolContext, message: str, match_all: list[str], match_some: list[str]
) -> str:
    """Sends a message to every agent with all of `match_all` and at least one of `match_some`
    tags, and returns their replies.

    Args:
        message: The message to send.
        match_all: Tags an agent must all have.
        match_some: Tags of which an agent must have at least one (empty: no condition).
    """
    agents = await ctx.memory.agents.page(
        user_id=ctx.agent.user_id, scoped=True, tags=match_all or None, limit=100
    )
    chosen = [
        a
        for a in agents
        if a.id != ctx.agent.id and (not match_some or set(match_some) & set(a.tags))
    ][:MAX_AGENTS]
    if not chosen:
        raise ToolError("no agent matches those tags")

    async def one(agent_id: str) -> dict[str, str]:
        try:
            return {"agent_id": agent_id, "response": await ask(ctx, agent_id, message)}
        except ToolError as exc:
            return {"agent_id": agent_id, "error": str(exc)}

    replies = await asyncio.gather(*(one(a.id) for a in chosen))
    return json.dumps(list(replies), ensure_ascii=False)


_BACKGROUND: set[asyncio.Task[str]] = set()


def _finished(task: asyncio.Task[str]) -> None:
    _BACKGROUND.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a failed background ask is not an unhandled error


@REGISTRY.register(voice_safe=True)
async def send_message_to_agent_async(ctx: ToolContext, message: str, other_agent_id: str) -> str:
    """Sends a message to another agent without waiting for its reply.

    Args:
        message: The message to send.
        other_agent_id: The id of the agent to message.
    """
    await _other(ctx, other_agent_id)
    task = asyncio.create_task(_ask_and_deliver(ctx, other_agent_id, message))
    _BACKGROUND.add(task)
    task.add_done_callback(_finished)
    return "Sent message successfully."


REPLY_PREFIX = (
    "[Incoming message from agent with ID '{id}' - its reply to the message you sent it with "
    "send_message_to_agent_async]"
)


async def _ask_and_deliver(ctx: ToolContext, agent_id: str, message: str) -> str:
    """The async variant: the asked agent's reply goes back to the sender as Letta delivers
    an agent's message, a message in the sender's conversation (the one that asked, and no
    other: another caller's conversation never sees it) that the sender reads on its next
    turn. Stored under the conversation's turn lock, so never inside a running turn."""
    try:
        text = await ask(ctx, agent_id, message)
    except ToolError as exc:
        text = f"Error: {exc}"
    conv = ctx.conversation_id
    if conv is None or ctx.runner is None:
        return text
    from memory.ids import new_id
    from memory.models import MessageData

    note = MessageData(
        id=new_id("message"),
        agent_id=ctx.agent.id,
        role="user",
        kind="note",
        conversation_id=conv,
        identity_id=ctx.identity_id,
        content=f"{REPLY_PREFIX.format(id=agent_id)} {text}",
    )
    async with ctx.runner.turn_lock(conv):
        await ctx.memory.messages.append([note])
    return text
