"""Concurrent turns of many callers on ONE agent: edits of one agent-wide block
from two conversations at once (the agent's own core_memory_append through the loop) and
sleeptime-actor rewrites in between never lose an update; turns of two conversations
overlap in time while two turns of one conversation never do. A live gateway (chat
completions) and the loopback model, which records when each request is being answered."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memory.models import BlockData
from tests.support.fake_llm import FakeLLM, Reply, ToolCallSpec
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread

# two conversations without a caller (a caller's turn may not edit an agent-wide block)
USERS = ("conc-conv-a", "conc-conv-b")
PER_USER = 10
DELAY_S = 0.3  # each model request takes this long (recorded as its busy interval)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, FakeLLM]]:
    llm = FakeLLM()
    llm_srv = ServerThread(llm.app).start()
    db = tmp_path_factory.mktemp("conc") / "vg.db"
    try:
        with running_gateway(
            f"sqlite+aiosqlite:///{db}",
            openai_base_url=f"{llm_srv.url}/v1",
            openai_api_key="test",
            sleeptime_model="scripted/demo",
        ) as srv:
            yield srv, llm
    finally:
        llm_srv.stop()


def edit_of(body: dict[str, Any]) -> str:
    user = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    m = re.search(r"edit (\S+)", str(user["content"]))
    assert m, user
    return m.group(1)


async def test_parallel_edits_of_an_agent_wide_block_are_never_lost(
    gateway: tuple[ServerThread, FakeLLM],
) -> None:
    srv, llm = gateway
    busy: list[tuple[str, float, float]] = []  # (caller, start, end) of each model request

    async def before(body: dict[str, Any]) -> None:
        start = time.monotonic()
        await asyncio.sleep(DELAY_S)
        busy.append((edit_of(body).rsplit("-", 1)[0], start, time.monotonic()))

    def respond(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply(text="Noted.")
        tag = edit_of(body)
        return Reply(
            tool_calls=[ToolCallSpec("core_memory_append", {"label": "shop", "content": tag})]
        )

    llm.before, llm.responder = before, respond
    memory = srv.app.state.gw.memory
    async with httpx.AsyncClient(base_url=srv.url, timeout=300) as http:
        resp = await http.post(
            "/v1/agents/",
            json={
                "model": "openai/fake",
                "memory_blocks": [
                    {"label": "persona", "value": "I run a shop."},
                    {"label": "human", "value": ""},
                    {"label": "shop", "value": "Edits:", "limit": 20000},
                ],
            },
        )
        assert resp.status_code == 201, resp.text
        agent = resp.json()["id"]
        shop = srv.call(memory.blocks.get(agent, "shop"))
        assert isinstance(shop, BlockData) and shop.identity_id is None  # agent-wide

        def turn(user: str, n: int) -> Any:
            return http.post(
                "/v1/chat/completions",
                json={
                    "model": agent,
                    "conversation_id": user,
                    "messages": [{"role": "user", "content": f"Please note edit {user}-{n}"}],
                },
            )

        async def sleeptime_rewrite(n: int) -> None:  # a sleeptime commit on the same block
            await asyncio.sleep(0.2 * n)
            assert srv.loop is not None
            done = asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(
                    memory.blocks.modify(
                        agent, "shop", lambda v: f"{v}\nsleeptime-{n}", actor="sleeptime"
                    ),
                    srv.loop,
                )
            )
            await done

        results = await asyncio.gather(
            *(turn(u, n) for n in range(PER_USER) for u in USERS),
            *(sleeptime_rewrite(n) for n in range(3)),
        )
    responses = [r for r in results if isinstance(r, httpx.Response)]
    assert len(responses) == 2 * PER_USER
    failed = [(r.status_code, r.text) for r in responses if r.status_code != 200]
    assert not failed, failed

    final = srv.call(memory.blocks.get(agent, "shop"))
    lines = final.value.split("\n")
    expected = [f"{u}-{n}" for u in USERS for n in range(PER_USER)] + [
        f"sleeptime-{n}" for n in range(3)
    ]
    # every edit applied exactly once (none silently lost, none doubled)
    assert sorted(lines[1:]) == sorted(expected) and lines[0] == "Edits:", final.value
    assert final.version == 1 + len(expected)
    history = srv.call(memory.blocks.history(agent, "shop", limit=100))
    assert len(history) == len(expected)
    # each change started from the value the one before it left (no overwrite)
    ordered = sorted(history, key=lambda h: h.version)
    for before_, after in itertools.pairwise(ordered):
        assert after.old_value == before_.new_value

    # the two conversations' turns overlapped; the turns of one conversation never did
    def overlap(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
        return a[1] < b[2] and b[1] < a[2]

    same = [(a, b) for i, a in enumerate(busy) for b in busy[i + 1 :] if a[0] == b[0]]
    across = [(a, b) for i, a in enumerate(busy) for b in busy[i + 1 :] if a[0] != b[0]]
    assert len(busy) == 4 * PER_USER  # two requests per turn (the tool call, the answer)
    assert not [p for p in same if overlap(*p)], "two turns of one conversation overlapped"
    assert any(overlap(*p) for p in across), "the two conversations never ran at once"

    # a caller's conversation cannot write the agent-wide block: a clean refusal to the tool
    llm.before, llm.requests[:] = None, []
    async with httpx.AsyncClient(base_url=srv.url, timeout=60) as http:
        resp = await http.post(
            "/v1/chat/completions",
            json={
                "model": agent,
                "user": "conc-caller",
                "messages": [{"role": "user", "content": "Please note edit caller-0"}],
            },
        )
    assert resp.status_code == 200, resp.text
    refusal = next(m for m in llm.requests[-1]["messages"] if m["role"] == "tool")
    assert "read-only" in str(refusal["content"]), refusal
    assert srv.call(memory.blocks.get(agent, "shop")).value == final.value
