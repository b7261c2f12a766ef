"""(b) What `smart` turn detection costs next to `vad`, with local whisper: CPU per
turn split into STT, turn detection and the rest, and the calls one gateway process holds,
both policies in the same run.

Two gateway processes (uvicorn + uvloop, as `voice-gateway serve`), one per policy: local
whisper tiny.en (int8, the defaults: VG_STT_WORKERS=2 decodes at once, VG_STT_THREADS=1 thread
each; speculative transcripts at pauses), the real webrtcvad,
`vad` (400 ms of silence) or `smart` (Smart Turn v3.2 + the transcript, the defaults), the real
agent loop and SQLite, instant LLM and TTS (so STT and turn detection are what differ). Calls
come from a load-generator process (bench/_wsload.py), each streaming an espeak-ng sentence
once per --cycle as 20 ms frames in real time, each at its own phase. `--speech real:<clip>`
streams one of the recordings of tests/support/real_speech.py instead (e.g. `real:001`, "ten
of clubs", which `smart` ends on the model's word), with its own room tone between turns
instead of digital silence: espeak-ng ends its sentences at full level, and `smart`'s fade rule
then waits the full 1.6 s on every turn.

CPU split (bench/_cpu_split.py, inside the gateway's process, over each level's streaming
window): STT = whisper's threads (the decode pool and CTranslate2's workers: every decode,
speculative ones included); turn detection = Smart Turn's inference threads + its feature
extraction on the event loop; the rest = the process's CPU minus those. Per turn = divided by
the turns the gateway ended in the window.

Capacity: the rules of bench/voice_concurrency.py (docs/benchmarks.md, "Capacity by the
caller's measure"): frame rule (client frame p99 < 20 ms, none dropped) and reply rule (reply
latency = last frame with sound sent -> first reply audio received, minus the policy's endpoint
delay, p99 < 100 ms; no turn without reply audio within 1 s of its endpoint); a level counts
only with the load generator on schedule. The endpoint delay is each policy's own, measured in
the same run on an idle gateway (one call, `--calibrate` turns: last frame with sound sent ->
`speech.stopped` received, p50): the silence rule's is fixed, Smart Turn's depends on the model
and the transcript. A turn's reply audio is looked for from the earliest frame its turn can end
on (the silence rule at `vad`'s 400 ms, or at `smart`'s 200 ms minimum pause). Levels are small
(whisper decodes on a 2-vCPU machine limit a process to a few calls): each policy's sweep stops
at its first failing level. Result: the largest level each policy holds, and smart / vad
(the target: >= 0.75).

The target is judged by one budget for both policies (`same_budget`): reply
latency p99 (last frame with sound -> first reply audio, not minus anything) under `vad`'s idle
endpoint delay + 100 ms, the other conditions as above. For `vad` it is the reply rule itself.
The reply rule measures each policy against its own idle endpoint delay: `smart`, whose idle
turn ends 150-200 ms sooner, then fails as soon as its replies come as late as `vad`'s idle ones
(a queued decode, or a turn the model did not decide and the silence rule ended), however it
compares with `vad` at the same load; it is what the caller hears that the target is about.
Both are reported (`smart_vs_vad.reply_rule`); a `smart` sweep goes on past the reply rule
while the budget holds.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
from typing import Any

import numpy as np
from _capacity import capacity_gateways
from _common import emit, parser, ratio
from _concurrency_consts import LONG_SPEECH
from _concurrency_load import cycle_pattern
from _concurrency_rules import behind, row
from _voice import load, timed_client
from voice_concurrency import run_level, settle

from voice_gateway.turns.config import TurnConfig

POLICIES = ("vad", "smart")
SILENCE_MS = TurnConfig().silence_ms  # VG_ENDPOINT_SILENCE_MS, the default
SMART_MIN_MS = TurnConfig().min_silence_ms  # VG_TURN_MIN_SILENCE_MS: `smart`'s earliest end
TARGET = 0.75


async def calibrate(url: str, frames: np.ndarray, last: int, turns: int) -> dict[str, Any]:
    """One call on an idle gateway: per turn, last frame with sound sent -> speech.stopped
    received, and -> first reply audio received (ms)."""
    c = await timed_client(url).connect()
    await c.start()
    stopped: list[float] = []
    v2v: list[float] = []
    for i in range(turns + 1):  # the first turn warms the call up
        base = len(c.sent_at)
        done = len(c.of_type("response.done"))
        await c.stream(frames, 16000)
        await c.wait_for("response.done", timeout=60, count=done + 1)
        t_last = c.sent_at[base + last]
        at = next(
            (r.at for r in c.events if r.at >= t_last and r.event["type"] == "speech.stopped"),
            None,
        )
        first = c.first_audio_after(t_last)
        if i and at is not None and first is not None:
            stopped.append((at - t_last) * 1000)
            v2v.append((first - t_last) * 1000)
    await c.send({"type": "session.end"})
    await c.wait_closed()
    return {
        "endpoint_delay_ms": round(statistics.median(stopped), 1),
        "endpoint_delay_max_ms": round(max(stopped), 1),
        "client_voice_to_voice_p50_ms": round(statistics.median(v2v), 1),
        "turns": len(stopped),
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--levels", default="", help="comma-separated call counts")
    p.add_argument("--seconds", type=float, default=0.0, help="streaming time per level")
    p.add_argument("--cycle", type=float, default=6.0, help="seconds per turn per call")
    p.add_argument("--speech", default=LONG_SPEECH)
    p.add_argument("--calibrate", type=int, default=6, help="idle turns for the endpoint delay")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.isdigit()] or (
        [1, 2] if args.quick else [1, 2, 3, 4, 6, 8, 10]
    )
    seconds = args.seconds or (10.0 if args.quick else 30.0)
    patterns = {
        "vad": cycle_pattern(args.cycle, args.speech, SILENCE_MS),
        "smart": cycle_pattern(args.cycle, args.speech, SMART_MIN_MS),
    }
    out: list[dict[str, Any]] = []
    calib: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        gws = capacity_gateways(tmp, POLICIES, "turn_capacity")
        try:
            agents = {
                policy: [gw.agent(name=f"caller-{i}") for i in range(max(levels) + 1)]
                for policy, gw in gws.items()
            }
            for policy, gw in gws.items():
                pat = patterns[policy]
                clip = np.frombuffer(b"".join(pat.frames), dtype="<i2")
                url = f"{gw.ws_url}/v1/agents/{agents[policy][-1]}/voice"
                settle(list(gws.values()))
                calib[policy] = asyncio.run(calibrate(url, clip, pat.last, args.calibrate))
                print(json.dumps({policy: calib[policy]}), file=sys.stderr)
            done: set[str] = set()
            for k, n in enumerate(levels):
                order = POLICIES if k % 2 == 0 else POLICIES[::-1]  # take turns going first
                for policy in order:
                    if policy in done:
                        continue
                    attempts = 0
                    while True:
                        attempts += 1
                        settle(list(gws.values()))
                        ends0 = turn_ends(gws[policy].url)
                        level = run_level(
                            gws[policy],
                            agents[policy],
                            n,
                            seconds,
                            1,
                            patterns[policy],
                            endpoint_delay_ms=calib[policy]["endpoint_delay_ms"],
                        )
                        if attempts == 2 or not behind(level):
                            break
                    split = level["server_cpu"].pop("split")
                    level["same_budget"] = same_budget(level, calib["vad"]["endpoint_delay_ms"])
                    ends = turn_ends(gws[policy].url)
                    split["turn_ends"] = {k: v - ends0.get(k, 0) for k, v in ends.items()}
                    out.append({"policy": policy, "attempts": attempts, "split": split, **level})
                    print(json.dumps({"policy": policy, **_line(level, split)}), file=sys.stderr)
                    if not level["same_budget"]["passed"] and not behind(level):
                        done.add(policy)
        finally:
            for gw in gws.values():
                gw.stop()
    held = {
        policy: max(
            (lv["calls"] for lv in out if lv["policy"] == policy and lv["passed"]), default=0
        )
        for policy in POLICIES
    }
    held_same = {
        policy: max(
            (lv["calls"] for lv in out if lv["policy"] == policy and lv["same_budget"]["passed"]),
            default=0,
        )
        for policy in POLICIES
    }
    emit(
        "turn_capacity",
        {
            "quick": args.quick,
            "seconds_per_level": seconds,
            "levels_run": levels,
            "turn_cycle_s": args.cycle,
            "speech": args.speech,
            "stt": "whisper tiny.en, int8, 2 workers x 1 thread, speculative transcripts",
            "calibration": calib,
            "rules": {
                "frame": "client frame p99 < 20 ms, no frame dropped",
                "reply": "reply latency p99 (last speech frame sent -> first reply audio, minus "
                "the policy's idle endpoint delay) < 100 ms, no turn without reply audio "
                "within 1 s of its endpoint",
                "both": "every call ran to the end, load generator p99 lateness < 20 ms",
            },
            "max_calls_passing": held,
            "smart_vs_vad": {
                "judged_by": "same_budget",
                "ratio": ratio(held_same["smart"], held_same["vad"]),
                "target": f"smart's largest level >= {TARGET} x vad's",
                "met": held_same["smart"] >= TARGET * held_same["vad"] > 0,
                "reply_rule": {
                    "ratio": ratio(held["smart"], held["vad"]),
                    "met": held["smart"] >= TARGET * held["vad"] > 0,
                },
            },
            "same_budget": {
                "rule": "reply latency p99 (last speech frame sent -> first reply audio) < "
                "vad's idle endpoint delay + 100 ms, no turn unanswered, frame rule",
                "budget_ms": round(calib["vad"]["endpoint_delay_ms"] + 100, 1),
                "max_calls_passing": held_same,
                "ratio": ratio(held_same["smart"], held_same["vad"]),
            },
            "cpu_per_turn": {
                policy: _pooled([lv["split"] for lv in out if lv["policy"] == policy])
                for policy in POLICIES
            },
            "table": [
                {
                    "policy": lv["policy"],
                    **_line(lv, lv["split"]),
                    "row": row("fast", "per-call", "raw", lv),
                }
                for lv in out
            ],
            "levels": out,
            **load(),
        },
    )


def same_budget(level: dict[str, Any], vad_endpoint_ms: float) -> dict[str, Any]:
    """The level judged by one absolute budget for both policies: vad's idle endpoint delay +
    100 ms for the reply latency p99 (a level's latencies are all minus the same constant, so
    its p99 plus that constant is the absolute p99)."""
    reply = level["reply"]
    rel = reply["latency_minus_endpoint"].get("p99_ms")
    p99 = None if rel is None else round(rel + reply["endpoint_delay_ms"], 1)
    ok = (
        p99 is not None
        and p99 < vad_endpoint_ms + 100
        and reply["turns"]
        and not reply["turns_unanswered"]
        and level["rules"]["frame"]
    )
    return {"reply_p99_ms": p99, "passed": bool(ok and not behind(level))}


def turn_ends(url: str) -> dict[str, float]:
    """The gateway's turn ends so far, by what decided (silence, model, text, fallback:<why>)
    from its /metrics (vg_turn_ends_total, vg_turn_detector_fallbacks_total)."""
    import httpx

    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        for name, key in (
            ("vg_turn_ends_total{by=", ""),
            ("vg_turn_detector_fallbacks_total{", "fallback:"),
        ):
            if line.startswith(name):
                label = line.split('"')[1]
                out[key + label] = out.get(key + label, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _line(level: dict[str, Any], split: dict[str, Any]) -> dict[str, Any]:
    reply = level["reply"]["latency_minus_endpoint"]
    return {
        "calls": level["calls"],
        "passed": level["passed"],
        "client_frame_p99_ms": level["client_frame_latency"].get("p99_ms"),
        "reply_p50_ms": reply.get("p50_ms"),
        "reply_p99_ms": reply.get("p99_ms"),
        "reply_abs_p99_ms": level["same_budget"]["reply_p99_ms"],
        "same_budget_passed": level["same_budget"]["passed"],
        "turns": level["reply"]["turns"],
        "turns_unanswered": level["reply"]["turns_unanswered"],
        "process_cores": level["server_cpu"]["process_cores"],
        "cpu_ms_per_turn": split["cpu_ms_per_turn"],
        "stt_decodes_per_turn": round(split["stt_decodes"] / max(1, split["turns"]), 2),
        "turn_inferences_per_turn": round(split["turn_inferences"] / max(1, split["turns"]), 2),
        "turn_ends": split.get("turn_ends"),
        "loader_late_p99_ms": level["loader_lateness"].get("p99_ms"),
        "loadavg_1m": level["loadavg_1m_start_end"],
        "fail_reasons": level["fail_reasons"],
    }


def _pooled(splits: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU per turn over every level of a policy (ms): all its windows' CPU / all its turns."""
    turns = sum(s["turns"] for s in splits)
    if not turns:
        return {"turns": 0}
    per = {
        part: round(sum(s["cpu_s"][part] for s in splits) * 1000 / turns, 1)
        for part in ("process", "stt", "turn_detection", "turn_model", "turn_features", "rest")
    }
    return {
        "turns": turns,
        "ms": per,
        "share": {k: ratio(per[k], per["process"]) for k in ("stt", "turn_detection", "rest")},
        "stt_decodes_per_turn": round(sum(s["stt_decodes"] for s in splits) / turns, 2),
        "turn_inferences_per_turn": round(sum(s["turn_inferences"] for s in splits) / turns, 2),
    }


if __name__ == "__main__":
    main()
