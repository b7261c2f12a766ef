"""The gateway's garbage-collector setting: applied while it runs, restored when it stops, and a
bad value is refused with a clear message."""

from __future__ import annotations

import gc

import httpx
import pytest
from pydantic import ValidationError

from tests.support.gateway import running_gateway
from voice_gateway.settings import Settings


def test_full_collection_threshold_is_set_while_serving_and_restored(sqlite_url: str) -> None:
    before = gc.get_threshold()
    assert before[2] != 37
    with running_gateway(sqlite_url, gc_full_every=37) as server:
        assert httpx.get(f"{server.url}/v1/health/", timeout=10).status_code == 200
        assert gc.get_threshold() == (before[0], before[1], 37)
    assert gc.get_threshold() == before


def test_default_is_cpythons_own() -> None:
    assert Settings().gc_full_every == 10 == gc.get_threshold()[2]


@pytest.mark.parametrize("value", ["0", "-3", "often"])
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("VG_GC_FULL_EVERY", value)
    with pytest.raises(ValidationError, match="gc_full_every"):
        Settings()
