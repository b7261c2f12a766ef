"""A cancellation (barge-in) that arrives while the next LLM chunk is already there must stop
the stream. (asyncio.wait_for on Python 3.11 returned the chunk and dropped the cancel, so a
typed barge-in during a fast stream let the whole reply play.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agents.llm.base import LLMChunk, LLMProvider, LLMRequest

CHUNKS = 50


class _InstantLLM(LLMProvider):
    """Yields chunks without ever waiting; asks for the consumer's cancellation at chunk 10."""

    name = "instant"

    def __init__(self) -> None:
        super().__init__(timeout_s=5.0, retries=0)
        self.consumer: asyncio.Task[list[str]] | None = None

    async def _stream(self, req: LLMRequest) -> AsyncIterator[LLMChunk]:
        for i in range(CHUNKS):
            if i == 10:
                assert self.consumer is not None
                self.consumer.cancel()  # the chunk below is ready when the cancel lands
            yield LLMChunk(text=f"{i} ")


async def test_cancel_with_a_chunk_ready_stops_the_stream() -> None:
    llm = _InstantLLM()
    got: list[str] = []

    async def consume() -> list[str]:
        async for chunk in llm.stream(LLMRequest(model="x", messages=[])):
            got.append(chunk.text)
            await asyncio.sleep(0)  # e.g. sending the delta to the caller
        return got

    llm.consumer = asyncio.create_task(consume())
    with pytest.raises(asyncio.CancelledError):
        await llm.consumer
    assert len(got) < CHUNKS
