"""Callbacks of background runs (`callback_url` of `POST /v1/agents/{id}/messages/async`), as
Letta sends them: when the run ends (completed, failed or cancelled) its outcome is POSTed as
JSON `{run_id, status, completed_at, metadata}`, the run's metadata carrying `result` (Letta's
LettaResponse: the run's messages, stop reason and usage).

The POST runs in a task of its own, after the run's task ended: the run never waits for it.
Each attempt has a short timeout; a connection error or a 5xx is retried a couple of times
with a growing pause; any other answer ends it. The outcome (`callback_sent_at`,
`callback_status_code`, `callback_error`) is kept on the run; failures are logged. At
shutdown, callbacks still under way get a moment to finish, then are cancelled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx

from memory.ids import utcnow
from memory.runs import ACTIVE
from memory.service import Memory
from voice_gateway.protocol.letta import iso
from voice_gateway.protocol.letta_runs import CALLBACK_KEY, run_json
from voice_gateway.runs import ActiveRun

log = logging.getLogger(__name__)


# a run's messages as the API shows them, of the kinds asked for (None: all)
RenderMessages = Callable[[list[Any], frozenset[str] | None], list[dict[str, Any]]]


class RunCallbacks:
    def __init__(
        self,
        memory: Memory,
        render: RenderMessages,
        *,
        timeout_s: float = 5.0,
        attempts: int = 3,
        pause_s: float = 0.5,
    ) -> None:
        self.memory = memory
        self.render = render
        self.timeout_s, self.attempts, self.pause_s = timeout_s, attempts, pause_s
        self.tasks: set[asyncio.Task[None]] = set()

    def watch(self, run: ActiveRun, url: str) -> None:
        """POST the run's outcome to `url` once it has ended."""
        task = asyncio.create_task(self._after(run, url), name=f"callback {run.run_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _after(self, run: ActiveRun, url: str) -> None:
        assert run.task is not None
        await asyncio.wait({run.task})
        cancelled = run.task.cancelled()
        try:
            payload = await self.payload(run.run_id, cancelled)
        except Exception:  # the run (or its agent) was deleted meanwhile
            log.warning("run %s: no callback, the run is gone", run.run_id, exc_info=True)
            return
        sent_at, status, error = await self.send(run.run_id, url, payload)
        outcome = {"url": url, "sent_at": iso(sent_at), "status_code": status, "error": error}
        try:
            await self.memory.runs.merge_metadata(run.run_id, {CALLBACK_KEY: outcome})
        except Exception:
            log.warning("run %s: callback outcome not stored", run.run_id, exc_info=True)

    async def payload(self, run_id: str, cancelled: bool) -> dict[str, Any]:
        run = await self.memory.runs.get(run_id)
        status = run.status
        if status in ACTIVE:  # ended without its final record (a crash inside the loop)
            status = "cancelled" if cancelled else "failed"
        rows = await self.memory.messages.page(
            run.agent_id, turn_id=run.id, limit=1000, order="asc"
        )
        kinds = (run.request_config or {}).get("include_return_message_types")
        metadata = run_json(run)["metadata"]
        metadata["result"] = {
            "messages": self.render(rows, frozenset(kinds) if kinds else None),
            "stop_reason": {"message_type": "stop_reason", "stop_reason": run.stop_reason},
            "usage": {
                "message_type": "usage_statistics",
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": run.completion_tokens,
                "total_tokens": run.prompt_tokens + run.completion_tokens,
                "step_count": run.step_count,
            },
        }
        completed = iso(run.completed_at) if run.completed_at else iso(None)
        return {"run_id": run.id, "status": status, "completed_at": completed, "metadata": metadata}

    async def send(
        self, run_id: str, url: str, payload: dict[str, Any]
    ) -> tuple[Any, int | None, str | None]:
        """POST with retries: (when it was first sent, the last status code, the error)."""
        sent_at, status, error = utcnow(), None, None
        async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as http:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.pause_s * 2 ** (attempt - 1))
                try:
                    resp = await http.post(url, json=payload)
                except httpx.HTTPError as exc:
                    status, error = None, f"{type(exc).__name__}: {exc}"[:500]
                    continue
                status = resp.status_code
                error = None if status < 500 else f"the callback endpoint answered {status}"
                if status < 500:
                    break
        if error is not None:
            log.warning("run %s: callback to %s failed: %s", run_id, url, error)
        return sent_at, status, error

    async def aclose(self, grace_s: float = 5.0) -> None:
        tasks = list(self.tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
