"""The gateway's garbage-collector settings: applied while it runs, restored when it stops, and a
bad value is refused with a clear message."""

from __future__ import annotations

import gc

import httpx
import pytest
from pydantic import ValidationError

from tests.support.gateway import running_gateway
from voice_gateway.settings import Settings


def test_thresholds_are_set_while_serving_and_restored(sqlite_url: str) -> None:
    before = gc.get_threshold()
    assert before[0] != 1234 and before[2] != 37
    with running_gateway(sqlite_url, gc_full_every=37, gc_young_every=1234) as server:
        assert httpx.get(f"{server.url}/v1/health/", timeout=10).status_code == 200
        assert gc.get_threshold() == (1234, before[1], 37)
    assert gc.get_threshold() == before


def test_defaults() -> None:
    """A full collection after CPython's 10 middle ones; young collections 5000 allocations
    apart instead of CPython's 700 (docs/operations.md#garbage-collection)."""
    assert Settings().gc_full_every == 10 == gc.get_threshold()[2]
    assert Settings().gc_young_every == 5000 != gc.get_threshold()[0]


@pytest.mark.parametrize("name", ["gc_full_every", "gc_young_every"])
@pytest.mark.parametrize("value", ["0", "-3", "often"])
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"VG_{name.upper()}", value)
    with pytest.raises(ValidationError, match=name):
        Settings()
