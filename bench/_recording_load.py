"""Phone calls per process with call recording off and on, in the same run (bench/call_control.py).

One gateway process as bench/phone_capacity.py runs it (bench/_capacity.py `capacity_gateways`:
local whisper, `vad`, instant LLM and TTS, CPU split) and two agents on it, alike but for
`metadata.recording.enabled`. Each level runs phone_capacity's load (`run_calls`: Twilio Media
Streams reading a real recording with room tone between turns) once per agent, the order
alternating by level, and is judged by phone_capacity's `verdict` against one budget: the idle
reply latency p50 (one call, recording off) + 100 ms."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from _capacity import capacity_gateways
from _common import ratio
from phone_capacity import BUDGET_OVER_IDLE_MS, line, phone_pattern, run_calls, verdict
from voice_concurrency import settle

from tests.support.phone import TOKEN

MODES = ("off", "on")
HOLD = 0.9  # recording on holds at least this share of the calls recording off holds


def recorded_files(tmp: str) -> int:
    """The recordings on disk (the gateway's data directory is the SQLite file's)."""
    return sum(1 for _ in (Path(tmp) / "recordings").glob("*/*.wav"))


def recording_capacity(
    tmp: str, levels: list[int], seconds: float, cycle: float, calibrate: int
) -> dict[str, Any]:
    pat = phone_pattern("003", cycle)
    (gw,) = capacity_gateways(tmp, ("vad",), "call_control", twilio_auth_token=TOKEN).values()
    out: list[dict[str, Any]] = []
    files: dict[str, int] = {}
    try:
        agents = {
            "off": gw.agent(name="phone-line"),
            "on": gw.agent(name="phone-line", metadata={"recording": {"enabled": True}}),
        }
        settle([gw])
        idle = asyncio.run(run_calls(gw, agents["off"], 1, (calibrate + 1) * cycle, pat))
        budget = float(idle["reply"].get("p50_ms", 0.0)) + BUDGET_OVER_IDLE_MS
        done: set[str] = set()
        for k, n in enumerate(levels):
            for mode in MODES if k % 2 == 0 else MODES[::-1]:
                if mode in done:
                    continue
                before = recorded_files(tmp)
                settle([gw])
                level = asyncio.run(run_calls(gw, agents[mode], n, seconds, pat))
                level.update(verdict(level, budget))
                files[f"{mode}@{n}"] = recorded_files(tmp) - before
                out.append({"recording": mode, **level})
                print(json.dumps({"recording": mode, **line("vad", level)}), file=sys.stderr)
                if not level["passed"]:
                    done.add(mode)
    finally:
        gw.stop()
    return summarize(out, budget, idle, files)


def summarize(
    out: list[dict[str, Any]], budget: float, idle: dict[str, Any], files: dict[str, int]
) -> dict[str, Any]:
    held = {
        mode: max(
            (lv["calls"] for lv in out if lv["recording"] == mode and lv["passed"]), default=0
        )
        for mode in MODES
    }
    table = []
    for lv in out:
        row = {"recording": lv["recording"], **line("vad", lv)}
        row.pop("policy")
        table.append(row)
    by_level: dict[int, dict[str, dict[str, Any]]] = {}
    for row in table:
        by_level.setdefault(row["calls"], {})[row["recording"]] = row
    on_vs_off = {
        str(n): {
            "reply_p50": ratio(pair["on"]["reply_p50_ms"] or 0.0, pair["off"]["reply_p50_ms"] or 0),
            "reply_p99": ratio(pair["on"]["reply_p99_ms"] or 0.0, pair["off"]["reply_p99_ms"] or 0),
            "cpu_per_turn": ratio(
                pair["on"]["cpu_ms_per_turn"]["process"], pair["off"]["cpu_ms_per_turn"]["process"]
            ),
        }
        for n, pair in by_level.items()
        if set(pair) == set(MODES)
    }
    return {
        "budget_ms": round(budget, 1),
        "idle_reply": idle["reply"],
        "rule": "a level passes: reply p99 (last sound -> first reply media) < the idle p50 + "
        f"{BUDGET_OVER_IDLE_MS:.0f} ms, no turn unanswered (2.5 s), every call to the end, load "
        "generator p99 lateness < 20 ms",
        "max_calls_passing": held,
        "on_vs_off": on_vs_off,
        "recordings_written": files,
        "held_ratio": ratio(held["on"], held["off"]),
        "target": f"recording on holds >= {HOLD} x the calls of recording off",
        "met": held["on"] >= HOLD * held["off"] > 0,
        "table": table,
    }
