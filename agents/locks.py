"""Per-agent turn locks: two turns of one agent never interleave. The loop takes any
`TurnLocks`; this is the in-process default. The Redis leases shared by every instance are
transcripts/locks.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol


class TurnLocks(Protocol):
    def hold(self, key: str) -> AbstractAsyncContextManager[None]: ...


class LocalLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class LockTimeout(Exception):
    """Another instance held the agent's turn lock for longer than the wait allowed."""
