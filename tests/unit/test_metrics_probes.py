"""/metrics reads its state gauges from the components (voice_gateway/metrics.py probes): the
live calls by source, and a probe that fails leaves the others reported."""

from __future__ import annotations

from dataclasses import dataclass, field

from voice_gateway.live_calls import LiveCalls
from voice_gateway.metrics import Metrics


@dataclass(frozen=True)
class FakeTransport:
    source: str


@dataclass(eq=False)
class FakeCall:
    transport: FakeTransport
    drained: list[float] = field(default_factory=list)

    async def drain(self, deadline: float) -> None:
        self.drained.append(deadline)


def gauge(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} not in the exposition")


async def test_active_calls_come_from_the_live_calls() -> None:
    metrics, calls = Metrics(), LiveCalls()
    metrics.probe(calls.report)
    phone, voice, other = (FakeCall(FakeTransport(s)) for s in ("phone", "voice", "phone"))
    for call in (phone, voice, other):
        calls.add(call)
    text = (await metrics.render()).decode()
    assert gauge(text, 'vg_active_calls{source="phone"}') == 2
    assert gauge(text, 'vg_active_calls{source="voice"}') == 1
    calls.discard(phone)
    calls.discard(other)
    text = (await metrics.render()).decode()
    assert gauge(text, 'vg_active_calls{source="phone"}') == 0  # reported as 0, not left at 2
    assert len(calls) == 1 and list(calls) == [voice]


async def test_a_failing_probe_leaves_the_others() -> None:
    metrics = Metrics()

    async def broken(m: Metrics) -> None:
        raise RuntimeError("the database is down")

    async def served(m: Metrics) -> None:
        m.served("llm", {"openai/gpt-4o-mini": 3})

    metrics.probe(broken)
    metrics.probe(served)
    text = (await metrics.render()).decode()
    assert gauge(text, 'vg_provider_served{kind="llm",provider="openai/gpt-4o-mini"}') == 3
