"""Measurement inside the benchmark gateway process (bench/_voice.py starts it): per-frame
handling time of the call's input path (pipeline/input.py), event-loop lag, GC pauses, CPU and
live objects. Fixed-size samples, so a long run does not measure its own instrumentation growing."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from _common import summary


def _cpu() -> tuple[float, float, float]:
    """(wall, process CPU, main-thread CPU) seconds: CPU time is immune to a busy machine."""
    main = time.pthread_getcpuclockid(threading.main_thread().ident or 0)
    return time.monotonic(), time.process_time(), time.clock_gettime(main)


def _largest_containers(n: int = 5) -> list[tuple[int, str]]:
    import gc

    sizes = []
    for o in gc.get_objects():
        if isinstance(o, list | dict | set | tuple):
            sizes.append((len(o), type(o).__name__))
    return sorted(sizes)[-n:]


def _objects_by_type() -> dict[str, int]:
    """Live objects tracked by the garbage collector, by type (a leak shows as one growing)."""
    import gc
    from collections import Counter

    gc.collect()  # count what is still referenced, not garbage waiting for a collection
    counts = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
    return dict(counts)


def _garbage_by_type(top: int = 40) -> dict[str, int]:
    """With VG_BENCH_GARBAGE=1 (gc.DEBUG_SAVEALL from start-up): the cyclic garbage the collector
    found since the last reset, by type — what makes the full collections long and frequent."""
    import gc
    from collections import Counter

    counts = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    return dict(counts.most_common(top))


class Reservoir:
    """A uniform random sample of at most `size` values out of all appended (algorithm R) in
    a preallocated array: fixed memory however long the run (a soak must not measure its own
    instrumentation growing), untracked by the garbage collector, percentiles unbiased."""

    def __init__(self, size: int = 200_000, seed: int = 1) -> None:
        self.size, self.n = size, 0
        self._buf = array("d", bytes(8 * size))
        self._random = random.Random(seed).random

    def append(self, value: float) -> None:
        n = self.n
        if n < self.size:
            self._buf[n] = value
        else:
            j = int(self._random() * (n + 1))
            if j < self.size:
                self._buf[j] = value
        self.n = n + 1

    def values(self) -> list[float]:
        return list(self._buf[: min(self.n, self.size)])

    def clear(self) -> None:
        self.n = 0


@dataclass
class FrameStats:
    """Collected in the server process: per-frame handling time, loop lag, frames per call."""

    frame_us: Reservoir = field(default_factory=Reservoir)
    lag_ms: Reservoir = field(default_factory=lambda: Reservoir(50_000))
    gc_ms: Reservoir = field(default_factory=lambda: Reservoir(10_000))
    frames: dict[str, int] = field(default_factory=dict)
    metrics: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=5000))
    startup_objects: int = 0
    cpu_at_reset: tuple[float, float, float] = (0.0, 0.0, 0.0)  # wall, process, main thread
    frames_at_reset: int = 0

    def cpu(self) -> dict[str, Any]:
        """CPU used since the last reset (process, main thread) and over what wall time."""
        wall, proc, main = (b - a for a, b in zip(self.cpu_at_reset, _cpu(), strict=True))
        return {
            "seconds": round(wall, 3),
            "process_cpu_s": round(proc, 3),
            "main_thread_cpu_s": round(main, 3),
            "process_cores": round(proc / wall, 3) if wall else None,
            "main_thread_cores": round(main / wall, 3) if wall else None,
        }

    def snapshot(self) -> dict[str, Any]:
        import gc

        us = self.frame_us.values()
        return {
            "cpu": self.cpu(),
            "gc": {
                "tracked_objects": len(gc.get_objects()),
                "largest": _largest_containers(),
                "by_type": _objects_by_type(),
                "frozen_at_startup": self.startup_objects,
                "stats": gc.get_stats(),
                "garbage_by_type": _garbage_by_type(),
            },
            "frame_handling": summary([u / 1000 for u in us]),
            "frames_timed": self.frame_us.n,
            "loop_lag": summary(self.lag_ms.values()),
            "gc_pauses": summary(self.gc_ms.values()),
            "frames": dict(self.frames),
            "turn_metrics": list(self.metrics),
        }

    def clear(self) -> None:
        import gc

        gc.garbage.clear()
        for r in (self.frame_us, self.lag_ms, self.gc_ms):
            r.clear()
        self.cpu_at_reset = _cpu()
        self.metrics.clear()


def instrument(stats: FrameStats) -> None:
    """Time the call's input path (InputPath.audio: one call per 20 ms frame from the socket;
    InputPath.now: the socket's audio sink) and record each turn's metrics. Benchmark
    measurement only: the wrapped code runs unchanged."""
    from voice_gateway.pipeline.input import InputPath
    from voice_gateway.pipeline.session import VoiceSession

    audio = InputPath.audio
    now = InputPath.now
    send = VoiceSession.send
    perf = time.perf_counter
    frame_us, frames = stats.frame_us, stats.frames

    async def timed_audio(self: InputPath, pcm: bytes) -> None:
        t0 = perf()
        await audio(self, pcm)
        frame_us.append((perf() - t0) * 1e6)
        frames[self.label] = frames.get(self.label, 0) + 1

    async def recording_send(self: VoiceSession, type_: str, **fields: Any) -> None:
        if type_ == "turn.metrics":
            stats.metrics.append(fields)
        await send(self, type_, **fields)

    def timed_now(self: InputPath, pcm: bytes) -> bool:  # the socket's audio sink
        t0 = perf()
        took = now(self, pcm)
        if took:  # else the frame goes on to `audio`, timed there
            frame_us.append((perf() - t0) * 1e6)
            frames[self.label] = frames.get(self.label, 0) + 1
        return took

    InputPath.now = timed_now  # type: ignore[method-assign]
    InputPath.audio = timed_audio  # type: ignore[method-assign]
    VoiceSession.send = recording_send  # type: ignore[method-assign]
    import gc

    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = perf()
        elif info.get("generation") == 2:
            stats.gc_ms.append((perf() - started[0]) * 1000)

    gc.callbacks.append(on_gc)


async def watch_lag(stats: FrameStats, every_s: float = 0.01) -> None:
    while True:
        t0 = time.perf_counter()
        await asyncio.sleep(every_s)
        stats.lag_ms.append(max(0.0, (time.perf_counter() - t0 - every_s) * 1000))
