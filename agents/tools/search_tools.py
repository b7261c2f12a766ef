"""Built-in archival and recall tools; the read-only ones are voice-safe."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Literal

from agents.tools.registry import REGISTRY, ToolContext, ToolError


def _when(value: str | None, name: str) -> datetime | None:
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ToolError(f"{name} must be an ISO 8601 date or datetime, got {value!r}") from exc
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _now(ctx: ToolContext) -> datetime:
    return ctx.now or datetime.now(UTC)


@REGISTRY.register()
async def archival_memory_insert(
    ctx: ToolContext, content: str, tags: list[str] | None = None
) -> str:
    """Store a passage in long-term archival memory for later semantic search.

    Args:
        content: The text to store; self-contained, one fact or episode.
        tags: Optional tags to filter by later.
    """
    if not content.strip():
        raise ToolError("content is empty")
    if ctx.staged is not None:  # a sleeptime run: stored when the run commits
        ctx.staged.archive(content, list(tags or []))
        return "Stored in archival memory."
    if ctx.source_event_id and await ctx.memory.archival.exists(
        ctx.agent.id, ctx.source_event_id, content
    ):
        return "Already stored in archival memory."  # a re-run of the same event
    await ctx.memory.archival.insert(
        ctx.agent.id,
        [content],
        tags,
        source_event_id=ctx.source_event_id,
        identity_id=ctx.identity_id,  # a caller's passages are theirs alone
    )
    return "Stored in archival memory."


@REGISTRY.register(voice_safe=True)
async def archival_memory_search(
    ctx: ToolContext,
    query: str,
    tags: list[str] | None = None,
    tag_match_mode: Literal["any", "all"] = "any",
    top_k: int | None = None,
    start_datetime: str | None = None,
    end_datetime: str | None = None,
) -> str:
    """Search archival memory by meaning.

    Args:
        query: What to look for.
        tags: Only passages with these tags.
        tag_match_mode: "any" or "all" of the tags.
        top_k: Number of results (default 5).
        start_datetime: Only passages created at or after this ISO 8601 time.
        end_datetime: Only passages created at or before this ISO 8601 time.
    """
    hits = await ctx.memory.archival.search(
        ctx.agent.id,
        query,
        max(1, min(top_k or 5, 50)),
        tags=tags,
        match_all_tags=tag_match_mode == "all",
        start=_when(start_datetime, "start_datetime"),
        end=_when(end_datetime, "end_datetime"),
        identity_id=ctx.identity_id,
    )
    return json.dumps(
        [{"timestamp": h.created_at.isoformat(), "content": h.text, "tags": h.tags} for h in hits]
    )


@REGISTRY.register(voice_safe=True)
async def conversation_search(
    ctx: ToolContext,
    query: str,
    limit: int = 5,
    start_date: str | None = None,
    end_date: str | None = None,
) -> str:
    """Search past conversation messages by text, optionally within a time window.

    Args:
        query: Words that must appear in the message.
        limit: Maximum number of messages (default 5).
        start_date: Only messages at or after this ISO 8601 date or time.
        end_date: Only messages at or before this ISO 8601 date or time.
    """
    found = await ctx.memory.messages.search(
        ctx.agent.id,
        query,
        start=_when(start_date, "start_date"),
        end=_when(end_date, "end_date"),
        limit=max(1, min(limit, 50)),
        exclude_turn=ctx.turn_id,
        identity_id=ctx.identity_id,
    )
    return json.dumps(
        [
            {
                "timestamp": m.created_at.isoformat() if m.created_at else None,
                "role": m.role,
                "content": m.content,
            }
            for m in found
        ]
    )


@REGISTRY.register(voice_safe=True)
async def search_memory(
    ctx: ToolContext,
    convo_keyword_queries: list[str] | None = None,
    start_minutes_ago: int | None = None,
    end_minutes_ago: int | None = None,
) -> str:
    """Look up what you know about the caller: their latest words in archival memory, plus
    keyword search of past conversations.

    Args:
        convo_keyword_queries: Keywords to look for in past conversations (searched one by one).
        start_minutes_ago: Only memories from at most this many minutes ago.
        end_minutes_ago: Only memories from at least this many minutes ago.
    """
    now = _now(ctx)
    start = now - timedelta(minutes=start_minutes_ago) if start_minutes_ago is not None else None
    end = now - timedelta(minutes=end_minutes_ago) if end_minutes_ago is not None else None
    archival = []
    if ctx.user_text.strip():
        hits = await ctx.memory.archival.search(
            ctx.agent.id, ctx.user_text, 5, start=start, end=end, identity_id=ctx.identity_id
        )
        archival = [{"timestamp": h.created_at.isoformat(), "content": h.text} for h in hits]
    convo: dict[str, list[str]] = {}
    for keyword in convo_keyword_queries or []:
        found = await ctx.memory.messages.search(
            ctx.agent.id,
            keyword,
            start=start,
            end=end,
            limit=3,
            exclude_turn=ctx.turn_id,
            identity_id=ctx.identity_id,
        )
        convo[keyword] = [m.content for m in found]
    return json.dumps({"archival_search_results": archival, "convo_keyword_search_results": convo})
