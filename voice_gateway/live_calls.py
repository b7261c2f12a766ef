"""The calls in progress on this process: what graceful shutdown drains, what the
`vg_active_calls` gauge counts, and where every call gets its call record. A call is anything
with a transport that names its source and a `drain(deadline)`; the voice pipeline's sessions
are. Calls come in with `enter` and go with `leave`, which tell the `recorder` (the call
records, voice_gateway/call_records.py) when one is set."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol

from memory.models import AgentData
from voice_gateway.metrics import Metrics

log = logging.getLogger(__name__)
SOURCES = ("voice", "phone")  # always reported, 0 when idle


class CallTransport(Protocol):
    @property
    def source(self) -> str: ...

    async def close(self, code: int, reason: str = "") -> None: ...


class LiveCall(Protocol):
    @property
    def transport(self) -> CallTransport: ...

    async def drain(self, deadline: float) -> None: ...


class RecordedCall(LiveCall, Protocol):
    """What a call record is made of, as a session knows it (conversation and caller identity
    once the call has started)."""

    agent: AgentData
    conversation_id: str | None
    identity_id: str | None
    end_reason: str | None  # how it ended, once it has


class CallRecorder(Protocol):
    async def opened(self, call: RecordedCall) -> str:
        """The call record's id (a new record, or the outbound one the call answers)."""
        ...

    async def closed(self, call: RecordedCall, record_id: str, end_reason: str | None) -> None: ...


class LiveCalls:
    def __init__(self, recorder: CallRecorder | None = None) -> None:
        self._calls: set[LiveCall] = set()
        self._records: dict[str, RecordedCall] = {}  # call record id -> call
        self.recorder = recorder

    def add(self, call: LiveCall) -> None:
        self._calls.add(call)

    def discard(self, call: LiveCall) -> None:
        self._calls.discard(call)

    async def enter(self, call: RecordedCall) -> str | None:
        """Register a call and open its record (None: no recorder, or the database failed:
        the call goes on without one)."""
        self.add(call)
        if self.recorder is None:
            return None
        try:
            record_id = await self.recorder.opened(call)
        except Exception as exc:  # a record is bookkeeping: never the reason a call fails
            log.warning("call record not opened: %r", exc)
            return None
        self._records[record_id] = call
        return record_id

    async def leave(
        self, call: RecordedCall, record_id: str | None, end_reason: str | None
    ) -> None:
        self.discard(call)
        if record_id is None or self.recorder is None:
            return
        self._records.pop(record_id, None)
        try:
            await self.recorder.closed(call, record_id, end_reason)
        except Exception as exc:
            log.warning("call record %s not closed: %r", record_id, exc)

    def by_record(self, record_id: str) -> RecordedCall | None:
        """The live call of a call record, if it is on this process."""
        return self._records.get(record_id)

    def record_of(self, call: object) -> str | None:
        """The call record's id of a live call (None: it has none)."""
        return next((rid for rid, c in self._records.items() if c is call), None)

    def __len__(self) -> int:
        return len(self._calls)

    def __iter__(self) -> Iterator[LiveCall]:
        return iter(list(self._calls))

    def by_source(self) -> dict[str, int]:
        out = dict.fromkeys(SOURCES, 0)
        for call in self._calls:
            out[call.transport.source] = out.get(call.transport.source, 0) + 1
        return out

    async def report(self, metrics: Metrics) -> None:
        for source, n in self.by_source().items():
            metrics.active_calls.labels(source).set(n)
