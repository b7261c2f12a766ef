"""A gateway process's CPU split by what spent it (bench/turn_capacity.py): speech-to-text,
turn detection and the rest. Installed in the gateway's own process before the app starts
(`start_gateway(cpu_split=True)`); nothing of it is in the gateway's code.

- STT: every thread named `vg-stt`. The hooks name the thread that loads whisper and every
  thread that runs a decode (the decode pool); CTranslate2's own worker threads are created
  by the loading thread and inherit its name (Linux copies a thread's name to the threads it
  creates). So this is whisper's whole CPU: feature extraction, encoder and decoder, for every
  decode (speculative ones at pauses, finals, re-decodes of looped text).
- Turn detection: threads named `vg-turn` (Smart Turn's inference pool: onnxruntime with one
  intra-op thread runs on the calling thread), plus the incremental feature extraction on the
  event loop, timed with the event loop thread's CPU clock around each call.
- The rest: the process's CPU minus those two (the event loop's socket, protocol, VAD, agent
  loop and SQLite work, TTS, other threads).

Per-thread CPU comes from each thread's CPU clock (clock_gettime with the thread's clock id,
nanoseconds), names from /proc/self/task/<tid>/comm.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections import Counter
from typing import Any

_PR_SET_NAME = 15
STT, TURN = b"vg-stt", b"vg-turn"
counts: Counter[str] = Counter()  # decodes, inferences, turns ended
_features_ns = [0]  # event-loop CPU in the Smart Turn feature extractor
_named: set[int] = set()
_libc = ctypes.CDLL(None, use_errno=True)


def name_thread(name: bytes) -> None:
    """Give the calling OS thread a name (its threads created from now on inherit it)."""
    tid = threading.get_native_id()
    if tid not in _named:
        _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
        _named.add(tid)


def _thread_cpu_ns(tid: int) -> int:
    clock = ((~tid) << 3) | 6  # MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
    return time.clock_gettime_ns(clock)


def install() -> None:
    """Wrap whisper's loader and decoder, Smart Turn's inference and features, and the turn
    detector's end of turn (counted)."""
    import voice_gateway.stt.whisper as whisper
    import voice_gateway.turns.detector as turn
    import voice_gateway.turns.features as feats
    import voice_gateway.turns.model as smart

    load, decode = whisper.load_model, whisper.transcribe

    def load_model(threads: int | None = None, workers: int | None = None) -> Any:
        name_thread(STT)
        return load(threads, workers)

    def transcribe(audio: Any, threads: int | None = None, **options: Any) -> str:
        name_thread(STT)
        counts["stt_decodes"] += 1
        return decode(audio, threads, **options)

    whisper.load_model, whisper.transcribe = load_model, transcribe  # type: ignore[assignment]

    timed = smart.SmartTurnModel._timed

    def _timed(self: Any, pcm16: bytes) -> float:
        name_thread(TURN)
        counts["turn_inferences"] += 1
        return timed(self, pcm16)

    smart.SmartTurnModel._timed = _timed  # type: ignore[method-assign]

    cls = feats.RecentPcm
    for attr in ("append", "pcm", "reset"):
        setattr(cls, attr, _on_loop_cpu(getattr(cls, attr)))

    end = turn.TurnDetector._end

    def _end(self: Any, *args: Any) -> Any:
        counts["turns"] += 1
        return end(self, *args)

    turn.TurnDetector._end = _end  # type: ignore[method-assign]


def _on_loop_cpu(fn: Any) -> Any:
    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return fn(*args, **kw)
        finally:
            _features_ns[0] += time.thread_time_ns() - t0

    return timed


def snapshot() -> dict[str, Any]:
    """Cumulative CPU seconds: process, STT threads, turn detection, and the counters."""
    by_name: Counter[str] = Counter()
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                comm = f.read().strip()
            ns = _thread_cpu_ns(tid)
        except OSError:  # the thread ended meanwhile
            continue
        by_name[comm.decode("ascii", "replace")] += ns
    t = os.times()
    return {
        "process_s": t.user + t.system,
        "stt_s": by_name[STT.decode()] / 1e9,
        "turn_model_s": by_name[TURN.decode()] / 1e9,
        "turn_features_s": _features_ns[0] / 1e9,
        **{k: int(v) for k, v in counts.items()},
    }


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds spent between two snapshots, split, and per turn (ms)."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    turn_s = d["turn_model_s"] + d["turn_features_s"]
    rest_s = d["process_s"] - d["stt_s"] - turn_s
    turns = max(1, d.get("turns", 0))
    return {
        "turns": d.get("turns", 0),
        "stt_decodes": d.get("stt_decodes", 0),
        "turn_inferences": d.get("turn_inferences", 0),
        "cpu_s": {
            "process": round(d["process_s"], 3),
            "stt": round(d["stt_s"], 3),
            "turn_detection": round(turn_s, 3),
            "turn_model": round(d["turn_model_s"], 3),
            "turn_features": round(d["turn_features_s"], 3),
            "rest": round(rest_s, 3),
        },
        "cpu_ms_per_turn": {
            "process": round(d["process_s"] * 1000 / turns, 1),
            "stt": round(d["stt_s"] * 1000 / turns, 1),
            "turn_detection": round(turn_s * 1000 / turns, 1),
            "rest": round(rest_s * 1000 / turns, 1),
        },
    }
