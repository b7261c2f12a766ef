"""bench/text_eou.py runs as a developer runs it and reports what the docs quote: accuracy per
source of held-apart text and the cost per decision (its figures are judged by the unit tests'
bounds and read in the bench's JSON, not timed here)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_bench_smoke import bench


def test_text_eou_bench_reports_accuracy_and_cost(tmp_path: Path) -> None:
    out = bench("text_eou.py", "--quick", results=tmp_path)
    assert out["per_decision"]["n"] == 500
    assert out["per_decision"]["p99_ms"] > 0
    held = out["accuracy"]["heldout_all"]
    assert held["complete"] > 1000 and held["prefixes"] > 6000
    assert out["accuracy"]["heldout_chitchat"]["complete"] > 500
    for key in ("complete_right", "prefix_right"):
        assert 0.5 < held[key] <= 1
    assert set(held["sure"]) == {
        "prefix_coverage",
        "prefix_precision",
        "complete_coverage",
        "complete_precision",
    }
    assert out["weights_bytes"] < 2_000_000
