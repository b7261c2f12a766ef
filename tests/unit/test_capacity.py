"""Admission control's decision (voice_gateway/capacity.py): call slots per process, the
smoothed event-loop lag, and the lag timer on a real event loop."""

from __future__ import annotations

import asyncio
import time

from voice_gateway.capacity import Capacity, Refusal, Ticket


def test_slots_refuse_past_the_limit_and_free_on_release() -> None:
    cap = Capacity(max_calls=2, max_lag_ms=0)
    a, b = cap.admit(), cap.admit()
    assert isinstance(a, Ticket) and isinstance(b, Ticket)
    third = cap.admit()
    assert isinstance(third, Refusal) and third.reason == "slots"
    a.release()
    a.release()  # idempotent: one slot freed, not two
    assert cap.live == 1
    c = cap.admit()
    assert isinstance(c, Ticket)
    assert isinstance(cap.admit(), Refusal)
    assert cap.refused == 2


def test_no_limits_admit_everything() -> None:
    cap = Capacity(max_calls=0, max_lag_ms=0)
    cap.observe_lag(10_000)
    assert all(isinstance(cap.admit(), Ticket) for _ in range(1000))


def test_lag_refuses_while_behind_and_admits_once_it_recovers() -> None:
    cap = Capacity(max_calls=0, max_lag_ms=30)
    cap.observe_lag(40)  # one late tick (a GC pause) is smoothed away
    assert isinstance(cap.admit(), Ticket)
    for _ in range(20):
        cap.observe_lag(200)
    refused = cap.admit()
    assert isinstance(refused, Refusal) and refused.reason == "lag"
    for _ in range(60):
        cap.observe_lag(0.5)
    assert isinstance(cap.admit(), Ticket)


async def test_the_lag_timer_sees_a_blocked_event_loop() -> None:
    cap = Capacity(max_calls=0, max_lag_ms=30)
    cap.start()
    try:
        await asyncio.sleep(0.12)
        assert cap.lag_ms < 30  # an idle loop keeps up
        for _ in range(12):  # the loop held 0.2 s at a time: every tick is ~150 ms late
            time.sleep(0.2)  # noqa: ASYNC251 (blocking the loop is the point)
            await asyncio.sleep(0)
        assert cap.lag_ms > 30
        assert isinstance(cap.admit(), Refusal)
    finally:
        await cap.aclose()
    assert cap._watch is None
