"""The capacity and turn-taking benchmarks run end to end, briefly (one level, a few seconds,
three turns): a change to the product that breaks them (bench/_cpu_split.py's whisper wrapper
once lost an option and `turn_capacity` could not start) fails here rather than on the next
benchmark run. Only that they work is judged, not their figures: these machines are shared and
noisy. Each runs as a developer runs it (`cd bench && PYTHONPATH=..:. python X.py`), its results
and server logs written to a temporary folder (VG_BENCH_RESULTS), never over bench/results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def bench(
    script: str, *args: str, results: Path, env_extra: dict[str, str] | None = None
) -> dict[str, Any]:
    env = {
        **os.environ,
        **(env_extra or {}),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
        "HF_HUB_OFFLINE": "1",
        "VG_BENCH_RESULTS": str(results),
    }
    run = subprocess.run(
        [sys.executable, script, *args],
        cwd=ROOT / "bench",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out: dict[str, Any] = json.loads(run.stdout)
    assert json.loads((results / f"{out['bench']}.json").read_text()) == out
    return out


def test_turn_capacity_measures_both_policies(tmp_path: Path) -> None:
    out = bench(
        "turn_capacity.py",
        *("--quick", "--levels", "1", "--seconds", "8", "--cycle", "3", "--calibrate", "1"),
        *("--speech", "real:001"),
        results=tmp_path,
        # the model asked at every pause: deferred (the default), it runs only when the words
        # cannot tell, and on a quiet machine this clip's words decided every pause (0 runs)
        env_extra={"VG_TURN_DEFER_MODEL": "false"},
    )
    cpu = out["cpu_per_turn"]
    for policy in ("vad", "smart"):
        assert cpu[policy]["turns"] >= 1, cpu
        assert cpu[policy]["ms"]["stt"] > 0, cpu  # whisper's threads were clocked
        assert out["calibration"][policy]["endpoint_delay_ms"] > 0
    assert cpu["smart"]["ms"]["turn_model"] > 0 and cpu["smart"]["turn_inferences_per_turn"] > 0
    assert cpu["vad"]["ms"]["turn_detection"] == 0
    vad_idle = out["calibration"]["vad"]["endpoint_delay_ms"]
    assert out["same_budget"]["budget_ms"] == round(vad_idle + 100, 1)
    # the target is judged by that one budget; the reply rule's verdict is reported beside it
    verdict, held = out["smart_vs_vad"], out["same_budget"]["max_calls_passing"]
    assert verdict["judged_by"] == "same_budget"
    assert verdict["met"] == (held["smart"] >= 0.75 * held["vad"] > 0)
    assert set(verdict["reply_rule"]) == {"ratio", "met"}
    rows = {r["policy"]: r for r in out["table"]}
    assert set(rows) == {"vad", "smart"}
    for r in rows.values():
        assert r["turns"] >= 1 and r["reply_p99_ms"] is not None, r
        assert r["reply_abs_p99_ms"] is not None
    assert (tmp_path / "turn_capacity.smart.server.log").exists()


def test_voice_concurrency_judges_a_level_by_both_rules(tmp_path: Path) -> None:
    out = bench(
        "voice_concurrency.py",
        *("--quick", "--levels", "5", "--seconds", "8", "--cycle", "3"),
        *("--agents", "per-call", "--ws", "fast"),
        results=tmp_path,
    )
    (row,) = out["table"]
    assert row["calls"] == 5 and row["dropped"] == 0, row
    assert row["turns"] >= 5 and set(row["rules"]) == {"frame", "reply"}, row
    assert row["main_thread_us_per_frame"] > 0


def test_voice_concurrency_with_sleeptime_workers_and_overload(tmp_path: Path) -> None:
    """Real sleeptime workers beside the gateway (their CPU and the stream they consumed), and
    an overload whose refused calls may all fall to one load generator."""
    out = bench(
        "voice_concurrency.py",
        *("--quick", "--levels", "4", "--seconds", "6", "--cycle", "3"),
        *("--agents", "per-call", "--ws", "fast", "--sleeptime-workers", "1"),
        *("--overload", "--capacity", "2"),
        results=tmp_path,
    )
    (level,) = out["levels"]
    workers = level["sleeptime_workers"]
    assert workers["processes"] == 1 and workers["nice"] == 10, workers
    assert workers["published"] >= level["reply"]["turns"] > 0, workers
    assert workers["read"] > 0 and workers["cores"] >= 0, workers
    (over,) = out["overload"]["table"]
    assert (over["offered"], over["calls"], over["refused_1013"]) == (4, 2, 2), over
    assert over["half_served"] == 0, over
    assert list(tmp_path.glob("voice_concurrency.*.sleeptime-0.log"))


def test_recorded_calls_send_room_tone_between_turns() -> None:
    """A recording's call fills its cycle with the recording's own room tone, as a microphone
    would, never with digital silence (after which a detector that did not start afresh would
    hear room tone as speech); espeak-ng's, which has no room tone, with zeros. The turn still
    ends after the words, within the cycle."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from _concurrency_load import cycle_pattern
    finally:
        sys.path.remove(str(ROOT / "bench"))
    real = cycle_pattern(3.0, "real:001", 400)
    after = real.frames[real.last + 1 :]
    assert after and not any(f == bytes(len(f)) for f in after)
    assert real.last < real.endpoint < len(real.frames)
    said = cycle_pattern(3.0, "Hello there.", 400)
    assert all(f == bytes(len(f)) for f in said.frames[said.endpoint + 1 :])


def test_turn_taking_runs_through_a_phone_line(tmp_path: Path) -> None:
    from tests.support.real_speech import clips

    if not clips():
        return  # scripts/test installs pocketsphinx-testdata; the bench says it is missing
    out = bench("turn_taking.py", "--phone", "--quick", "--only", "vad_400", results=tmp_path)
    assert out["bench"] == "turn_taking_phone"
    vad = out["vad_400"]
    assert len(clips()) <= vad["samples_per_pause"] <= 2 * len(clips())  # two gaps at most
    # the silence rule through 8 kHz mu-law: every 1200 ms pause is cut, every finished clip
    # ends 400 ms after webrtcvad's last voiced frame
    assert vad["cutoff_rate"]["1200"] == 1.0 and vad["finished_cut_early"] == 0
    assert vad["delay_p50_ms"] >= 400


def test_phone_latency_on_real_speech_runs_both_policies(tmp_path: Path) -> None:
    from tests.support.real_speech import clips

    if not clips():
        return  # scripts/test installs pocketsphinx-testdata; the bench says it is missing
    out = bench("phone_latency.py", "--speech", "real", "--quick", results=tmp_path)
    assert out["bench"] == "phone_latency_real"
    for policy in ("vad", "smart"):  # every turn answered, each timed from the caller's side
        assert len(out[policy]["per_turn_ms"]) == 3 and min(out[policy]["per_turn_ms"]) > 0
    assert out["passed"] == (out["smart"]["p50_ms"] < out["vad"]["p50_ms"])


def test_phone_capacity_measures_both_policies(tmp_path: Path) -> None:
    from tests.support.real_speech import clips

    if not clips():
        return  # scripts/test installs pocketsphinx-testdata; the bench says it is missing
    out = bench(
        "phone_capacity.py",
        *("--quick", "--levels", "1", "--seconds", "8", "--cycle", "4", "--calibrate", "1"),
        results=tmp_path,
    )
    assert out["budget_ms"] == round(out["calibration"]["vad"]["reply"]["p50_ms"] + 100, 1)
    cpu = out["cpu_per_turn"]
    for policy in ("vad", "smart"):
        assert cpu[policy]["turns"] >= 1 and cpu[policy]["ms"]["stt"] > 0, cpu
    assert cpu["vad"]["ms"]["turn_detection"] == 0
    rows = {r["policy"]: r for r in out["table"]}
    assert set(rows) == {"vad", "smart"}
    for r in rows.values():  # each turn timed from the caller's side, and what ended it
        assert r["turns"] >= 1 and r["reply_p50_ms"] > 0 and r["turn_ends"], r
    assert set(rows["vad"]["turn_ends"]) == {"silence"}
    assert "silence" not in rows["smart"]["turn_ends"], rows["smart"]
    held, verdict = out["max_calls_passing"], out["smart_vs_vad"]
    assert verdict["met"] == (held["smart"] >= 0.75 * held["vad"] > 0)
