"""The model outside a turn: the request a turn would send now (Letta's preview-raw-payload),
and a one-off completion that stores nothing (Letta's generate)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.context import TEXT, estimate_tokens, order_context, to_openai
from agents.llm import LLMRegistry, LLMRequest, Usage
from agents.tool_steps import offered, rules_of
from memory.ids import default_conversation_id
from memory.models import AgentData

if TYPE_CHECKING:
    from agents.loop import AgentLoop


@dataclass(slots=True)
class Generated:
    content: str
    model: str  # the handle that answered
    usage: Usage


async def preview(
    loop: AgentLoop, agent: AgentData, text: str, conversation_id: str | None
) -> dict[str, Any]:
    """The chat-completions request a text turn of `text` would send as its first step: the
    compiled system prompt, the conversation's context and the new user message, the tools
    the rules allow. Nothing is stored and no model is called."""
    _, model = loop.llms.resolve(agent.model)
    solver = rules_of(agent)
    system = loop.prompts.get(agent, TEXT, None)
    if rules := solver.prompt_block():
        system = f"{system}\n\n<tool_usage_rules>\n{rules}\n</tool_usage_rules>"
    conv_id = conversation_id or default_conversation_id(agent.id)
    history = order_context(await loop.memory.messages.in_context(conv_id))
    tools = [t.schema() for t in offered(await loop.load_tools(agent, TEXT), solver)]
    payload: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": system},
            *to_openai(history),
            {"role": "user", "content": text},
        ],
        "tools": tools or None,
        "tool_choice": "auto" if tools else None,
        "stream": True,
        "user": f"user-{agent.user_id}" if agent.user_id else "user-local",
    }
    if tools:
        payload["parallel_tool_calls"] = True
    return payload


async def generate(llms: LLMRegistry, handle: str, prompt: str, system: str | None) -> Generated:
    """One completion of `prompt` (after `system`, if given) by model `handle`; no tools, no
    memory. Usage is the provider's, or estimated when it reports none."""
    provider, model = llms.resolve(handle)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    parts: list[str] = []
    usage = Usage()
    async for chunk in provider.stream(LLMRequest(model=model, messages=messages)):
        parts.append(chunk.text)
        if chunk.usage is not None:
            usage.add(chunk.usage)
    content = "".join(parts)
    if usage.total_tokens == 0:
        sent = sum(estimate_tokens(str(m["content"])) for m in messages)
        usage = Usage(prompt_tokens=sent, completion_tokens=estimate_tokens(content))
    return Generated(content, handle, usage)
