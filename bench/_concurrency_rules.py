"""voice_concurrency's verdicts: reply latency figures per level, the frame and reply
rules, the summary rows."""

from __future__ import annotations

from collections import Counter
from typing import Any

from _common import summary


def reply_figures(
    results: list[dict[str, Any]], endpoint_delay_ms: float, deadline_s: float
) -> dict[str, Any]:
    """Reply latency (ms, the endpoint delay taken off) of the turns that count, and how many
    of them got no reply audio within the deadline of their endpoint frame."""
    latencies: list[float] = []
    counted = unanswered = 0
    for r in results:
        for c in r.get("calls", []):
            for last, endpoint, reply in c["turns"]:
                if endpoint > r["stream_end"] - deadline_s:
                    continue  # the stream ended before the deadline: no verdict
                counted += 1
                if reply is not None:
                    latencies.append((reply - last) * 1000 - endpoint_delay_ms)
                if reply is None or reply - endpoint > deadline_s:
                    unanswered += 1
    return {
        "turns": counted,
        "turns_unanswered": unanswered,
        "latency_minus_endpoint": summary(latencies),
    }


_TURN_FIELDS = ("endpointing_ms", "end_of_turn_ms", "stt_ms", "llm_ttft_ms", "voice_to_voice_ms")


def turn_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The gateway's own `turn.metrics` of the level's turns (docs/voice_socket.md), each
    timing summarised, and what ended the turns: where a late reply waited (the silence, the
    end-of-turn model, the transcript, the model's time)."""
    out: dict[str, Any] = {
        k: summary([m[k] for m in metrics if isinstance(m.get(k), int | float)])
        for k in _TURN_FIELDS
    }
    eot = [m["end_of_turn"] for m in metrics if isinstance(m.get("end_of_turn"), dict)]
    out["end_of_turn_model_ms"] = summary(
        [e["model_ms"] for e in eot if isinstance(e.get("model_ms"), int | float)]
    )
    out["end_of_turn_source"] = dict(Counter(str(e.get("source")) for e in eot))
    out["longest_waits"] = longest_waits(metrics)
    return out


def longest_waits(metrics: list[dict[str, Any]], n: int = 3) -> list[dict[str, Any]]:
    """The `n` turns that waited longest for their end, with what decided them (the verdict's
    source, probability, reason and model time): why a tail turn waited."""
    timed = [m for m in metrics if isinstance(m.get("end_of_turn_ms"), int | float)]
    timed.sort(key=lambda m: -float(m["end_of_turn_ms"]))
    out = []
    for m in timed[:n]:
        e = m.get("end_of_turn") if isinstance(m.get("end_of_turn"), dict) else {}
        keep = ("complete", "source", "probability", "reason", "model_ms")
        out.append({"end_of_turn_ms": m["end_of_turn_ms"]} | {k: e.get(k) for k in keep if k in e})
    return out


def _verdict(
    n: int,
    server: dict[str, Any],
    results: list[dict[str, Any]],
    load1: tuple[float, float],
    endpoint_delay_ms: float,
    deadline_s: float,
) -> dict[str, Any]:
    failed = [r["failed"] for r in results if "failed" in r]
    calls = [c for r in results if "calls" in r for c in r["calls"]]
    lat = summary([x for c in calls for x in c["latencies"]])
    late = summary([x for r in results for x in r.get("late", [])])
    reply = reply_figures([r for r in results if "calls" in r], endpoint_delay_ms, deadline_s)
    sent = sum(c["sent"] for c in calls)
    counted = server["frames"]
    dropped = (
        sum(max(0, c["sent"] - counted.get(c["session_id"], 0)) for c in calls) if counted else None
    )
    bad_calls = [c for c in calls if c["errors"] or c["close_code"] != 1000]
    common = [f"load generator failed: {f}" for f in failed]
    if len(calls) != n or bad_calls:
        common.append(f"{len(bad_calls) + n - len(calls)} calls failed")
    if late.get("p99_ms", float("inf")) >= 20:
        # the gateway was not offered real-time load: never a pass, whatever else it shows
        common.append(f"load generator behind schedule: p99 {late.get('p99_ms')} ms")
    frame_reasons = []
    if dropped:
        frame_reasons.append(f"{dropped} frames dropped")
    if lat.get("p99_ms", float("inf")) >= 20:
        frame_reasons.append(f"client frame p99 {lat.get('p99_ms')} ms >= 20 ms")
    reply_reasons = []
    reply_p99 = reply["latency_minus_endpoint"].get("p99_ms", float("inf"))
    if reply_p99 >= 100:
        reply_reasons.append(f"reply p99 {reply_p99} ms (minus endpoint) >= 100 ms")
    if reply["turns_unanswered"] or not reply["turns"]:
        reply_reasons.append(
            f"{reply['turns_unanswered']} of {reply['turns']} turns without a reply in time"
        )
    rules = {"frame": not (common or frame_reasons), "reply": not (common or reply_reasons)}
    main_s = server["cpu"]["main_thread_cpu_s"]
    return {
        "calls": n,
        "passed": rules["frame"] and rules["reply"],
        "rules": rules,
        "fail_reasons": common + frame_reasons + reply_reasons,
        "client_frame_latency": lat,
        "reply": {**reply, "endpoint_delay_ms": endpoint_delay_ms, "deadline_s": deadline_s},
        "server_frame_handling": server["frame_handling"],
        "server_loop_lag": server["loop_lag"],
        "server_gc_pauses": server["gc_pauses"],
        "server_gc": server["gc"],
        "server_turn_metrics": turn_metrics(server.get("turn_metrics", [])),
        "server_cpu": {
            **server["cpu"],
            "main_thread_us_per_frame": round(main_s / max(1, sent) * 1e6, 2),
        },
        "frames_sent": sent,
        "frames_dropped": dropped,
        "failed_calls": len(bad_calls) + (n - len(calls)),
        # one agent: a conversation per caller, so as many as calls
        "distinct_conversations": len({c["conversation_id"] for c in calls}),
        "call_errors": sorted({e for c in bad_calls for e in c["errors"]})[:5] + failed,
        "replies": sum(c["replies"] for c in calls),
        "loader_cpu_us_per_frame": round(
            sum(r.get("cpu_s", 0.0) for r in results) / max(1, sent) * 1e6, 2
        ),
        "loader_lateness": late,
        "loadavg_1m_start_end": [round(x, 2) for x in load1],
    }


def row(impl: str, layout: str, client: str, level: dict[str, Any]) -> dict[str, Any]:
    """The level in one line: what the docs' table shows."""
    reply = level["reply"]["latency_minus_endpoint"]
    return {
        "ws": impl,
        "agents": layout,
        "client": client,
        "calls": level["calls"],
        "offered": level["offered"]["offered"],
        "refused_1013": level["offered"]["refused_1013"],
        "half_served": level["offered"]["half_served"],
        "passed": level["passed"],
        "rules": level["rules"],
        "client_p99_ms": level["client_frame_latency"].get("p99_ms"),
        "reply_p50_ms": reply.get("p50_ms"),
        "reply_p99_ms": reply.get("p99_ms"),
        "turns": level["reply"]["turns"],
        "turns_unanswered": level["reply"]["turns_unanswered"],
        "server_frame_p99_ms": level["server_frame_handling"].get("p99_ms"),
        "loop_lag_p99_ms": level["server_loop_lag"].get("p99_ms"),
        "dropped": level["frames_dropped"],
        "main_thread_cores": level["server_cpu"]["main_thread_cores"],
        "main_thread_us_per_frame": level["server_cpu"]["main_thread_us_per_frame"],
        "loader_cpu_us_per_frame": level["loader_cpu_us_per_frame"],
        "loader_cores": level["loader_cores"],
        "loader_late_p99_ms": level["loader_lateness"].get("p99_ms"),
        "loadavg_1m": level["loadavg_1m_start_end"],
        "fail_reasons": level["fail_reasons"],
    }


def behind(level: dict[str, Any]) -> bool:
    """The load generators fell behind their schedule: the level was not offered its load."""
    return bool(level["loader_lateness"].get("p99_ms", float("inf")) >= 20)


def best_levels(
    out: list[dict[str, Any]], impl: str, layout: str, passes: int = 1
) -> dict[str, Any]:
    """The largest level passing each rule (and both) for one protocol and layout: in each
    pass (`per_pass`), and the smallest of those (`frame`, `reply`, `both`: held every time)."""
    rules = {
        "frame": lambda lv: lv["rules"]["frame"],
        "reply": lambda lv: lv["rules"]["reply"],
        "both": lambda lv: lv["passed"],
    }
    per_pass = {rule: [0] * passes for rule in rules}
    for k in range(passes):
        mine = [
            lv
            for lv in out
            if lv["ws"] == impl and lv["agents"] == layout and lv.get("pass", 0) == k
        ]
        for rule, ok in rules.items():
            per_pass[rule][k] = max((lv["calls"] for lv in mine if ok(lv)), default=0)
    return {**{rule: min(v) for rule, v in per_pass.items()}, "per_pass": per_pass}
