"""Right to erasure of one caller: their running turns are cancelled, then their
conversations, messages, own blocks, caller-scoped passages, queued transcript events and
sleeptime state go in one transaction (IdentityStore.erase), and then from the database's
files (memory.scrub); the transcript stream entries of their turns leave Redis
(`vg:transcripts` and its dead-letter stream); the recordings of their calls (by caller key or
conversation) are deleted; in-process caches that held their words are dropped. Other callers'
memory and agent-wide memory stay."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from memory.calls import CallStore
from memory.scrub import scrub
from transcripts.bus import DEAD, STREAM
from voice_gateway.recordings import erase_recordings

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)
BATCH = 500


async def erase_caller(gw: Gateway, identity_id: str) -> dict[str, Any]:
    """Erase the identity; what was removed, by kind (counts)."""
    memory = gw.memory
    convs = await memory.conversations.page(identity_id=identity_id, limit=100_000)
    key = (await memory.identities.get(identity_id, None, scoped=False)).identifier_key
    runs = gw.runs
    for conv in convs:
        await runs.cancel(conv.id)
    erased = await memory.identities.erase(identity_id)
    for conv in convs:
        runs.forget(conv.id)
        memory.messages.cache.drop(conv.id)
        memory.agents.forget(conv.id)
        gw.loop.contexts.forget(conv.id)
    for agent_id in erased.agent_ids:
        gw.loop.prompts.forget(agent_id)
    out = asdict(erased)
    conv_ids = [c.id for c in convs]
    out["recordings"] = await erase_recordings(gw, erased.agent_ids, key or None, conv_ids)
    out["call_records"] = (
        await CallStore(memory.db).forget_caller(key, erased.agent_ids) if key else 0
    )
    out.pop("agent_ids")
    redis = gw.bus.redis
    out["stream_entries"] = await scrub_streams(redis, identity_id) if redis is not None else 0
    await scrub(memory.db)  # the deleted rows' bytes leave the database's files too
    log.info("erased identity %s: %s", identity_id, out)
    return out


async def scrub_streams(redis: Any, identity_id: str) -> int:
    """XDEL every entry of the transcript streams that carries the identity's turn."""
    removed = 0
    for stream in (STREAM, DEAD):
        start = "-"
        while True:
            entries = await redis.xrange(stream, min=start, max="+", count=BATCH)
            doomed = [eid for eid, fields in entries if _of(fields, identity_id)]
            if doomed:
                removed += int(await redis.xdel(stream, *doomed))
            if len(entries) < BATCH:
                break
            start = "(" + _text(entries[-1][0])
    return removed


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _of(fields: dict[Any, Any], identity_id: str) -> bool:
    for key, value in fields.items():
        if _text(key) != "event":
            continue
        try:
            event = json.loads(_text(value))
        except ValueError:
            return identity_id in _text(value)
        return isinstance(event, dict) and event.get("identity_id") == identity_id
    return False
