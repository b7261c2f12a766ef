"""Helpers for sleeptime tests: poll for a condition, talk to an agent, read what the workers
did (database and Redis) from the test's own connections."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import httpx
from sqlalchemy import func, select

from agents.llm.base import LLMRequest
from agents.llm.scripted import ScriptedProvider
from memory.db import Database
from memory.orm import BlockHistory, Outbox, Passage, ProcessedEvent
from tests.support.fake_llm import Reply, ToolCallSpec

T = TypeVar("T")


async def wait_until(
    check: Callable[[], Awaitable[T]], what: str, timeout: float = 60.0, every: float = 0.1
) -> T:
    """Poll `check` until it returns something truthy (a generous bound, not a timing test)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout}s (last: {got!r})")
        await asyncio.sleep(every)


async def new_agent(http: httpx.AsyncClient, name: str = "sleepy", **body: Any) -> str:
    body.setdefault("model", "scripted/demo")
    body.setdefault(
        "memory_blocks",
        [
            {"label": "persona", "value": "I am a helpful voice assistant."},
            {"label": "human", "value": ""},
        ],
    )
    resp = await http.post("/v1/agents/", json={"name": name, **body})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def say(http: httpx.AsyncClient, agent_id: str, text: str) -> str:
    """One text turn over the REST API; returns the assistant's reply."""
    resp = await http.post(
        f"/v1/agents/{agent_id}/messages", json={"messages": [{"role": "user", "content": text}]}
    )
    assert resp.status_code == 200, resp.text
    return " ".join(
        m["content"] for m in resp.json()["messages"] if m["message_type"] == "assistant_message"
    )


async def block(http: httpx.AsyncClient, agent_id: str, label: str = "human") -> dict[str, Any]:
    resp = await http.get(f"/v1/agents/{agent_id}/core-memory/blocks/{label}")
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


async def history(
    http: httpx.AsyncClient, agent_id: str, label: str = "human"
) -> list[dict[str, Any]]:
    resp = await http.get(f"/v1/agents/{agent_id}/core-memory/blocks/{label}/history")
    assert resp.status_code == 200, resp.text
    return list(resp.json())


class Ledger:
    """What the outbox holds versus what the workers recorded, read straight from the DB."""

    def __init__(self, url: str) -> None:
        self.db = Database(url)

    async def outbox(self) -> dict[str, bool]:
        """event_id -> sent?"""
        async with self.db.read() as s:
            rows = await s.execute(select(Outbox.event_id, Outbox.sent_at))
            return {e: sent is not None for e, sent in rows}

    async def sources(self) -> dict[str, str]:
        """event_id -> source (voice, text, phone) of every outbox row."""
        async with self.db.read() as s:
            rows = await s.execute(select(Outbox.event_id, Outbox.payload))
            return {e: str(p.get("source")) for e, p in rows}

    async def processed(self) -> set[str]:
        async with self.db.read() as s:
            return set(await s.scalars(select(ProcessedEvent.event_id)))

    async def unprocessed(self) -> set[str]:
        return set(await self.outbox()) - await self.processed()

    def all_processed_events(self, events: Iterable[Any]) -> Callable[[], Awaitable[bool]]:
        """A check for `wait_until`: have these events (anything with .event_id) been recorded?"""
        ids = {e.event_id for e in events}

        async def check() -> bool:
            return ids <= await self.processed()

        return check

    async def all_processed(self) -> bool:
        box = await self.outbox()
        return bool(box) and not set(box) - await self.processed()

    async def passages(self, agent_id: str) -> list[tuple[str, str | None]]:
        """(text, source_event_id) of the agent's archival passages."""
        async with self.db.read() as s:
            rows = await s.execute(
                select(Passage.text, Passage.source_event_id).where(Passage.agent_id == agent_id)
            )
            return [(t, e) for t, e in rows]

    async def history_actors(self, agent_id: str, label: str = "human") -> list[str]:
        async with self.db.read() as s:
            rows = await s.scalars(
                select(BlockHistory.actor)
                .where(BlockHistory.agent_id == agent_id, BlockHistory.label == label)
                .order_by(BlockHistory.id)
            )
            return list(rows)

    async def count_processed(self) -> int:
        async with self.db.read() as s:
            return int(await s.scalar(select(func.count()).select_from(ProcessedEvent)) or 0)

    async def close(self) -> None:
        await self.db.close()


def scripted_reply(body: dict[str, Any]) -> Reply:
    """Answer an OpenAI request as the offline scripted model would (for a FakeLLM responder
    that only changes a few answers)."""
    req = LLMRequest(model="demo", messages=body["messages"], tools=body.get("tools") or [])
    text, calls = ScriptedProvider().decide(req)
    return Reply(text=text, tool_calls=[ToolCallSpec(name, args) for name, args in calls])


def transcript_of(body: dict[str, Any]) -> str:
    """The sleeptime run's input (its first user message), '' for other requests."""
    first = next((m for m in body["messages"] if m["role"] == "user"), None)
    content = str(first.get("content") or "") if first else ""
    return content if "Transcript:" in content else ""


class Gate:
    """Hold FakeLLM answers whose request matches until `open()`; `arrived` tells when one
    is being held. The fake server's thread blocks meanwhile (only workers talk to it)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self._open = threading.Event()

    def hold(self) -> None:
        self.arrived.set()
        if not self._open.wait(60):
            raise RuntimeError("gate never opened")

    def open(self) -> None:
        self._open.set()

    async def wait_arrived(self, timeout: float = 60.0) -> None:
        if not await asyncio.to_thread(self.arrived.wait, timeout):
            raise AssertionError("no request reached the gate")
