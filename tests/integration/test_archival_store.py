"""Archival search through the store on an index large enough to be scanned off the event loop,
with inserts racing the scans (real SQLite / PostgreSQL, the real local embedder)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import numpy as np
import pytest

from memory.embeddings import LOCAL_HANDLE
from memory.ids import default_archive_id, new_id
from memory.models import BlockSpec
from memory.orm import Agent, Passage
from memory.service import Memory

N = 6000  # above VectorIndex.exact_below (4096): the int8 pass runs, in a worker thread


@pytest.fixture
async def memory(db_url: str) -> AsyncIterator[Memory]:
    mem = await Memory.open(db_url)
    yield mem
    await mem.close()


async def big_agent(memory: Memory, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    agent = await memory.agents.create(
        user_id=None,
        name="big",
        system="",
        model="scripted/demo",
        embedding=LOCAL_HANDLE,
        blocks=[BlockSpec(label="human", value="")],
    )
    vecs = rng.standard_normal((N, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [
        Passage(
            id=new_id("passage"),
            agent_id=agent.id,
            text=f"passage {i}",
            tags=["even"] if i % 2 == 0 else [],
            embedding=vecs[i].tobytes(),
            embedding_handle=LOCAL_HANDLE,
        )
        for i in range(N)
    ]
    async with memory.db.write() as s:
        s.add_all(rows)
    from sqlalchemy import update

    async with memory.db.write() as s:
        await s.execute(update(Agent).where(Agent.id == agent.id).values(archival_version=1))
    return agent.id, vecs


def brute_force(vecs: np.ndarray, q: np.ndarray, k: int, only_even: bool = False) -> list[str]:
    scores = np.einsum("ij,j->i", vecs, q)
    order = np.lexsort((np.arange(len(scores)), -scores))
    if only_even:
        order = order[order % 2 == 0]
    return [f"passage {i}" for i in order[:k]]


async def test_large_index_search_matches_brute_force_and_survives_racing_inserts(
    memory: Memory,
) -> None:
    rng = np.random.default_rng(5)
    agent_id, vecs = await big_agent(memory, rng)
    embedder = memory.archival.embedder_for(LOCAL_HANDLE)
    queries = ["where is the red bicycle", "what does the user eat", "birthday plans"]
    qvecs = await embedder.embed(queries)

    hits = await memory.archival.search(agent_id, queries[0], top_k=7)
    assert [h.text for h in hits] == brute_force(vecs, qvecs[0], 7)
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))
    tagged = await memory.archival.search(agent_id, queries[1], top_k=4, tags=["even"])
    assert [h.text for h in tagged] == brute_force(vecs, qvecs[1], 4, only_even=True)

    # searches and inserts interleave: every search sees a consistent index (the old rows'
    # ranking, plus possibly new rows), and the new rows are found afterwards
    new_texts = ["The user's red bicycle is in the garage.", "The user eats oatmeal daily."]

    async def insert(text: str) -> None:
        await memory.archival.insert(agent_id, [text])

    results = await asyncio.gather(
        *(memory.archival.search(agent_id, queries[i % 3], top_k=5) for i in range(9)),
        *(insert(t) for t in new_texts),
    )
    for i, found in enumerate(results[:9]):
        old = [h.text for h in found if h.text.startswith("passage ")]
        assert old == brute_force(vecs, qvecs[i % 3], 5)[: len(old)]
        assert len(found) == 5
    after = await memory.archival.search(agent_id, "red bicycle in the garage", top_k=1)
    assert after[0].text == new_texts[0]
    assert len(memory.archival._cache[default_archive_id(agent_id)].index) == N + 2
