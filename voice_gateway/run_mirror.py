"""Background runs' streams in Redis, so a run can be re-attached on any gateway, also after
the one running it restarted (`POST /v1/runs/{id}/stream`).

The gateway that runs a background run writes each SSE frame of it (token by token, as
`/messages/async` runs stream) to the Redis stream `vg:run:{id}` (XADD, trimmed to MAXLEN
entries, expiring TTL_S after the last frame) and keeps an owner key `vg:run:{id}:owner` alive
(renewed every third of `run_owner_ttl_s`) until the run ends. A gateway that does not run it
replays the stream from the client's `starting_after` and follows it live (XREAD) until the
`[DONE]` frame. A run whose owner key has expired while the run is still `created`/`running`
was left by a gateway that crashed: it is marked `failed` (stop reason `error`, error "the
gateway running it stopped") when a gateway attaches to it or starts up; its stream then ends
with that stop reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger(__name__)
MAXLEN = 20_000  # frames kept per run (a token-by-token run of ~20k tokens)
TTL_S = 24 * 3600
DONE = "data: [DONE]\n\n"
ORPHANED = "the gateway running it stopped"


def _key(run_id: str) -> str:
    return f"vg:run:{run_id}"


def _owner(run_id: str) -> str:
    return f"vg:run:{run_id}:owner"


def _seq(frame: str) -> int | None:
    if not frame.startswith("data: {"):
        return None
    try:
        seq = json.loads(frame[6:]).get("seq_id")
    except ValueError:
        return None
    return seq if isinstance(seq, int) else None


class RunMirror:
    def __init__(self, redis: Any, owner_ttl_s: float) -> None:
        self.redis = redis
        self.owner_ttl_s = owner_ttl_s
        self.tasks: set[asyncio.Task[None]] = set()

    async def claim(self, run_id: str) -> None:
        """This gateway runs it (before the run is stored, so no one sees it ownerless)."""
        await self.redis.set(_owner(run_id), "1", px=int(self.owner_ttl_s * 1000))

    def publish(self, run_id: str, frames: AsyncIterator[str]) -> None:
        task = asyncio.create_task(self._publish(run_id, frames))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _publish(self, run_id: str, frames: AsyncIterator[str]) -> None:
        beat = asyncio.create_task(self._beat(run_id))
        try:
            async for frame in frames:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.xadd(_key(run_id), {"f": frame}, maxlen=MAXLEN, approximate=True)
                    pipe.expire(_key(run_id), TTL_S)
                    await pipe.execute()
        except Exception:  # Redis gone: the run goes on, re-attaching elsewhere does not
            log.warning("run %s: its stream is no longer mirrored to Redis", run_id, exc_info=True)
        finally:
            beat.cancel()
            with contextlib.suppress(Exception):
                await self.redis.delete(_owner(run_id))

    async def _beat(self, run_id: str) -> None:
        while True:
            await asyncio.sleep(self.owner_ttl_s / 3)
            with contextlib.suppress(Exception):
                await self.redis.set(_owner(run_id), "1", px=int(self.owner_ttl_s * 1000))

    async def owned(self, run_id: str) -> bool:
        return bool(await self.redis.exists(_owner(run_id)))

    async def has(self, run_id: str) -> bool:
        return bool(await self.redis.exists(_key(run_id)))

    async def replay(self, run_id: str, starting_after: int, orphan: Any) -> AsyncIterator[str]:
        """The run's frames after seq `starting_after`, live until `[DONE]`. When the stream
        stalls and no gateway owns the run any more, `await orphan()` gives the frames that
        end it (the run marked failed)."""
        last = "0-0"
        while True:
            got = await self.redis.xread({_key(run_id): last}, count=200, block=1000)
            for _, entries in got or []:
                for entry_id, fields in entries:
                    last = entry_id
                    frame = fields[b"f"].decode()
                    seq = _seq(frame)
                    if seq is None or seq > starting_after:
                        yield frame
                    if frame == DONE:
                        return
            if not got and not await self.owned(run_id):
                for frame in await orphan():
                    yield frame
                return

    async def aclose(self) -> None:
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=10)
