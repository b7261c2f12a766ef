"""The scheduler: sends due scheduled messages to their agents as background runs, and
places due scheduled calls (voice_gateway/outbound_calls.py).

One task per gateway process, started and stopped with the app (VG_SCHEDULE_TICK_S: how often
it looks; 0: this process fires none). Every VG_SCHEDULE_TICK_S it reads the due schedules and
claims each firing in the database (memory/schedules.py): with several workers or instances on
one database exactly one process wins a firing and starts its run, through the same code as
`POST /v1/agents/{id}/messages/async` (one agent loop). A one-time schedule is deleted by its
claim; a recurring one moves to its cron expression's next time after now, so firings missed
while no gateway ran are sent once, not once per missed time. A firing is claimed before its
run starts: if the process dies in between, that firing is lost, never sent twice."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from pydantic import ValidationError

from memory.ids import utcnow
from memory.schedules import ScheduleData, ScheduleStore
from voice_gateway.cron import Cron, CronError
from voice_gateway.errors import ApiError
from voice_gateway.gateway import Gateway
from voice_gateway.outbound_calls import PlaceCall, place
from voice_gateway.protocol.letta_schedule import CALL_BASE, run_request
from voice_gateway.routes.rest_runs import start_async

log = logging.getLogger(__name__)


def parse_cron(gw: Gateway, expression: str) -> Cron:
    """The expression as this gateway accepts it (a leading seconds field only with
    VG_SCHEDULE_CRON_SECONDS); CronError says what is wrong."""
    return Cron.parse(expression, seconds=gw.settings.schedule_cron_seconds)


class Scheduler:
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.store = ScheduleStore(gw.memory.db)
        self.tick_s = gw.settings.schedule_tick_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Scheduler:
        self._task = asyncio.create_task(self._run(), name="scheduler")
        return self

    async def aclose(self) -> None:
        """Stop looking (a run already started goes on, owned by the runs registry)."""
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the database away for a moment: look again next tick
                log.exception("scheduler: looking for due scheduled messages failed")
            await asyncio.sleep(self.tick_s)

    async def tick(self, now: datetime | None = None) -> list[str]:
        """Claim and send what is due at `now`; the ids of the schedules this process fired.
        A draining gateway (SIGTERM) claims none: another one, or it after its restart, will."""
        now = now or utcnow()
        fired: list[str] = []
        if self.gw.draining:
            return fired
        for schedule in await self.store.due(now):
            if not await self.store.claim(schedule, self._next(schedule, now)):
                log.debug("scheduled message %s: claimed by another process", schedule.id)
                continue
            fired.append(schedule.id)
            await self._send(schedule)
        return fired

    @staticmethod
    def _next(schedule: ScheduleData, now: datetime) -> datetime | None:
        """When a recurring schedule is due next (None: one-time, or never again)."""
        if schedule.kind != "recurring" or not schedule.cron_expression:
            return None
        try:  # stored ones were accepted; seconds too, in case the setting changed since
            return Cron.parse(schedule.cron_expression, seconds=True).next_after(now)
        except CronError:
            return None

    async def _send(self, schedule: ScheduleData) -> None:
        if "call" in schedule.message:
            await self._call(schedule)
            return
        try:
            agent = await self.gw.memory.agents.get(schedule.agent_id)
            run = await start_async(self.gw, agent, run_request(schedule.message))
        except Exception as exc:  # gone agent, a conversation waiting for an approval, ...
            log.warning("scheduled message %s: not sent: %s", schedule.id, exc)
            return
        log.info("scheduled message %s: sent to %s as run %s", schedule.id, agent.id, run.run_id)

    async def _call(self, schedule: ScheduleData) -> None:
        """Place the scheduled call (its record's metadata names the schedule). A refusal
        (slots, quota, allowlist, Twilio) leaves a failed call record; the firing is spent:
        a one-time schedule is gone, a recurring one tries again at its next time."""
        stored = schedule.message
        base = (self.gw.settings.public_url or stored.get(CALL_BASE) or "").rstrip("/")
        try:
            body = PlaceCall.model_validate(stored["call"])
            body.metadata = {**body.metadata, "schedule_id": schedule.id}
            agent = await self.gw.memory.agents.get(schedule.agent_id)
            record = await place(self.gw, agent, body, base, record_refusal=True)
        except ApiError as exc:
            log.warning("scheduled call %s: refused (%d): %s", schedule.id, exc.status, exc.detail)
            return
        except ValidationError as exc:  # stored by an older body; its values hold numbers
            fields = ", ".join(".".join(map(str, e["loc"])) for e in exc.errors())
            log.warning("scheduled call %s: stored call invalid (%s)", schedule.id, fields)
            return
        except Exception as exc:  # a gone agent, the database away for a moment, ...
            log.warning("scheduled call %s: not placed: %s", schedule.id, exc)
            return
        log.info("scheduled call %s: placed as call %s", schedule.id, record.id)
