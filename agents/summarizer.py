"""Context-window management: fold old in-context messages into a summary message."""

from __future__ import annotations

import logging

from agents.context import (
    estimate_tokens,
    extractive_summary,
    message_tokens,
    split_for_summary,
    to_openai,
)
from agents.llm import LLMError, LLMProvider, LLMRequest
from memory.ids import new_id
from memory.models import AgentData, MessageData
from memory.service import Memory

log = logging.getLogger(__name__)

SUMMARY_PROMPT = (
    "Summarize the conversation so far in a few short paragraphs. Keep every fact the user "
    "stated about themselves, decisions made, and open questions. Write plain text."
)


class Summarizer:
    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.runs = 0

    async def fit(
        self,
        agent: AgentData,
        conversation_id: str,
        system: str,
        context: list[MessageData],
        budget: int,
        provider: LLMProvider,
        model: str,
        *,
        tokens: int | None = None,
        identity_id: str | None = None,
    ) -> list[MessageData]:
        """Return `context` unchanged when it fits `budget` tokens, else summary + recent.
        `tokens`: the sum of `message_tokens` over `context` if the caller has it already."""
        if tokens is None:
            tokens = sum(message_tokens(m) for m in context)
        used = estimate_tokens(system) + tokens
        if used <= budget:
            return context
        keep_budget = max(budget // 2 - estimate_tokens(system), budget // 8)
        old, keep = split_for_summary(context, keep_budget)
        old = [m for m in old if m.seq is not None]
        if not old:
            return context
        text = await self._summarize(old, provider, model)
        summary = MessageData(
            id=new_id("message"),
            agent_id=agent.id,
            conversation_id=conversation_id,
            identity_id=identity_id,
            role="user",
            kind="summary",
            content=text,
        )
        # the summary replaces the old messages in one transaction
        await self.memory.messages.append([summary], evict_upto=max(m.seq or 0 for m in old))
        self.runs += 1
        log.info(
            "conversation %s: summarized %d messages (%d tokens over budget)",
            conversation_id,
            len(old),
            used - budget,
        )
        return [summary, *keep]

    async def _summarize(self, old: list[MessageData], provider: LLMProvider, model: str) -> str:
        req = LLMRequest(
            model=model,
            messages=[{"role": "system", "content": SUMMARY_PROMPT}, *to_openai(old)],
            purpose="summarize",
        )
        try:
            parts = [chunk.text async for chunk in provider.stream(req)]
            text = "".join(parts).strip()
            if text:
                return text
        except LLMError as exc:
            log.warning("summary by the model failed (%s); using an extractive summary", exc)
        return extractive_summary(old)
