"""Which conversation a request names, and what compact, fork and recompile do to it.

A conversation is visible to whoever may see its agent: another user's conversation id is
a 404 exactly like an unknown one. `default` (with the agent named) is the agent's default
conversation, as Letta accepts it; so is an agent id in its place (Letta's deprecated form)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from agents.context import TEXT, memory_metadata, order_context
from memory.ids import new_id
from memory.models import AgentData, ConversationData, MessageData, NotFound
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway, gateway_of


async def conversation(
    request: Request, conversation_id: str, agent_id: str | None
) -> tuple[AgentData, ConversationData]:
    """The (agent, conversation) the request may use, or NotFound."""
    gw = gateway_of(request)
    convs = gw.memory.conversations
    if conversation_id == "default" or conversation_id.startswith("agent-"):
        named = agent_id if conversation_id == "default" else conversation_id
        if not named:
            raise ApiError(422, "conversation 'default' needs the agent_id of its agent")
        agent = await gw.auth.agent(request, named)
        conv_id = await convs.ensure_default(agent.id, agent.user_id)
        return agent, await convs.get(conv_id, agent.id)
    conv = await convs.get(conversation_id)
    if agent_id is not None and conv.agent_id != agent_id:
        raise NotFound("conversation", conversation_id)
    try:
        agent = await gw.auth.agent(request, conv.agent_id)
    except NotFound:  # another user's agent: the conversation does not exist for this caller
        raise NotFound("conversation", conversation_id) from None
    return agent, conv


async def visible_agent_ids(request: Request) -> list[str] | None:
    """The agents whose conversations the principal may list (None: all)."""
    gw = gateway_of(request)
    p = await gw.auth.principal(request)
    if not p.scoped:
        return None
    ids: list[str] = []
    after: str | None = None
    while True:
        page = await gw.memory.agents.page(user_id=p.user_id, scoped=True, limit=1000, after=after)
        ids += [a.id for a in page]
        if len(page) < 1000:
            return ids
        after = page[-1].id


async def compact(gw: Gateway, agent: AgentData, conv: ConversationData) -> dict[str, Any]:
    """Fold the conversation's whole context window into one summary message (under its
    turn lock, so no turn of it runs meanwhile)."""
    async with gw.loop.locks.hold(conv.id):
        context = order_context(await gw.memory.messages.in_context(conv.id, None))
        before = len(context)
        if not context:  # Letta's: nothing to compact is a bad request
            raise ApiError(400, f"conversation {conv.id} has no messages in context to compact")
        if not [m for m in context if m.seq is not None and m.kind != "summary"]:
            summary = next((m.content for m in context if m.kind == "summary"), "")
            return {"num_messages_before": before, "num_messages_after": before, "summary": summary}
        provider, model = gw.llms.resolve(conv.model or agent.model)
        kept = await gw.loop.summarizer.fit(
            agent, conv.id, "", context, 0, provider, model, identity_id=conv.identity_id
        )
    gw.loop.contexts.forget(conv.id)
    summary = next((m.content for m in kept if m.kind == "summary"), "")
    return {"num_messages_before": before, "num_messages_after": len(kept), "summary": summary}


async def fork(
    gw: Gateway, agent: AgentData, conv: ConversationData, upto: str | None
) -> ConversationData:
    """A new conversation of the same agent and caller holding a copy of the source's
    in-context messages (up to and including message `upto`)."""
    context = order_context(await gw.memory.messages.in_context(conv.id, None))
    if upto is not None:
        ids = [m.id for m in context]
        if upto not in ids:
            raise NotFound("message in the conversation's context", upto)
        context = context[: ids.index(upto) + 1]
    new = await gw.memory.conversations.create(
        agent.id,
        identity_id=conv.identity_id,
        user_id=conv.user_id,
        source=conv.source,
        summary=conv.summary,
        model=conv.model,
    )
    await system_message(gw, agent.id, new.id, new.identity_id)
    copies = [_copy(m, new.id) for m in context]
    if copies:
        await gw.memory.messages.append(copies)
    return await gw.memory.conversations.get(new.id)


def _copy(m: MessageData, conversation_id: str) -> MessageData:
    return m.model_copy(
        update={"id": new_id("message"), "seq": None, "conversation_id": conversation_id}
    )


async def recompile(gw: Gateway, agent: AgentData, conv: ConversationData, dry_run: bool) -> str:
    """The system prompt the conversation's next turn gets (the agent's blocks as its caller
    sees them, as they are now). Unless `dry_run`, cached prompts of the agent are dropped and
    the conversation's system message holds it."""
    seen = await gw.memory.agents.get(agent.id, identity_id=conv.identity_id)
    if not dry_run:
        gw.loop.prompts.forget(agent.id)
    text = _text_prompt(gw, seen, conv.id, conv.identity_id)
    if not dry_run:
        await gw.memory.conversations.set_system(conv.id, agent.id, conv.identity_id, text)
    return text


async def system_message(
    gw: Gateway, agent_id: str, conversation_id: str, caller: str | None
) -> None:
    """Store a new conversation's system message (Letta lists one first): the prompt as the
    conversation's caller sees it now."""
    seen = await gw.memory.agents.get(agent_id, identity_id=caller)
    text = _text_prompt(gw, seen, conversation_id, caller)
    await gw.memory.conversations.set_system(conversation_id, agent_id, caller, text)


def _text_prompt(gw: Gateway, seen: AgentData, conversation_id: str, caller: str | None) -> str:
    """The prompt a text turn of the conversation gets (agents/loop.py adds the same)."""
    base: str = gw.loop.prompts.get(seen, TEXT, caller)
    return f"{base}\n\n{memory_metadata(seen, conversation_id)}"
