"""Admission control: overload is refused, not shared.

Past its capacity a process that takes every call lets all of them degrade: replies come late
for everyone. So a new call (voice socket, Twilio, WebRTC) is admitted only while the process
keeps up, judged by two figures with thresholds in the settings:

- call slots: at most `VG_PROCESS_MAX_CALLS` live calls in this process (0: no limit). Exact
  and immediate, so a burst of calls cannot get in before the load they bring shows up;
- event-loop lag: a 50 ms timer's lateness, smoothed (EWMA, ~0.5 s): over `VG_ADMIT_MAX_LAG_MS`
  (0: off) the process is already behind (other work, a slow disk, a busy machine) and new
  calls wait for another instance.

A refused call is told so before anything of it is served: the voice socket and the Twilio
media stream close with 1013 (try again later), the Twilio webhook answers 503 so Twilio asks
the number's Fallback URL, a WebRTC offer gets 503 with Retry-After. Each refusal is counted in
`vg_calls_refused_total{source, reason}`. Slots are per process, not per identity (per-identity
limits are voice_gateway/quotas.py's job).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

LAG_EVERY_S = 0.05  # the lag timer's period
LAG_ALPHA = 0.1  # EWMA weight of one sample: ~10 samples (0.5 s) of memory
RETRY_AFTER_S = 2  # what a refused caller is told to wait


@dataclass(slots=True)
class Refusal:
    """Why a call was refused: `reason` is "slots" or "lag" (the metric's label)."""

    reason: str
    detail: str


class Ticket:
    """One admitted call's slot; `release` is idempotent."""

    __slots__ = ("owner", "released")

    def __init__(self, owner: Capacity) -> None:
        self.owner, self.released = owner, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.live -= 1


class Capacity:
    """The process's call slots and its event-loop lag; `admit` decides."""

    def __init__(self, max_calls: int, max_lag_ms: float) -> None:
        self.max_calls = max_calls  # 0: no limit
        self.max_lag_ms = max_lag_ms  # 0: lag not judged
        self.live = 0
        self.lag_ms = 0.0  # smoothed lateness of the lag timer
        self.refused = 0
        self._watch: asyncio.Task[None] | None = None

    def refusal(self) -> Refusal | None:
        """None when a new call may come in now."""
        if self.max_calls and self.live >= self.max_calls:
            return Refusal("slots", f"server at capacity ({self.max_calls} calls): try again")
        if self.max_lag_ms and self.lag_ms > self.max_lag_ms:
            return Refusal("lag", "server overloaded (event loop behind): try again")
        return None

    def admit(self) -> Ticket | Refusal:
        """A ticket (release it when the call ends), or why not."""
        refused = self.refusal()
        if refused is not None:
            self.refused += 1
            if self.refused == 1 or self.refused % 100 == 0:
                log.warning(
                    "admission: call refused (%s; %d refused so far, %d live, lag %.1f ms)",
                    refused.reason,
                    self.refused,
                    self.live,
                    self.lag_ms,
                )
            return refused
        self.live += 1
        return Ticket(self)

    def observe_lag(self, late_ms: float) -> None:
        self.lag_ms += LAG_ALPHA * (late_ms - self.lag_ms)

    async def _watch_lag(self) -> None:
        clock = time.perf_counter
        while True:
            t0 = clock()
            await asyncio.sleep(LAG_EVERY_S)
            self.observe_lag(max(0.0, (clock() - t0 - LAG_EVERY_S) * 1000))

    def start(self) -> None:
        """Start the lag timer (owned here, cancelled by `aclose`)."""
        if self.max_lag_ms and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watch_lag())

    async def aclose(self) -> None:
        task, self._watch = self._watch, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if (current := asyncio.current_task()) and current.cancelling():
                    raise
