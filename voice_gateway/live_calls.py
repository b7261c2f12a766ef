"""The calls in progress on this process: what graceful shutdown drains and what the
`vg_active_calls` gauge counts. A call is anything with a transport that names its source and
a `drain(deadline)`; the voice pipeline's sessions are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from voice_gateway.metrics import Metrics

SOURCES = ("voice", "phone")  # always reported, 0 when idle


class CallTransport(Protocol):
    @property
    def source(self) -> str: ...


class LiveCall(Protocol):
    @property
    def transport(self) -> CallTransport: ...

    async def drain(self, deadline: float) -> None: ...


class LiveCalls:
    def __init__(self) -> None:
        self._calls: set[LiveCall] = set()

    def add(self, call: LiveCall) -> None:
        self._calls.add(call)

    def discard(self, call: LiveCall) -> None:
        self._calls.discard(call)

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
