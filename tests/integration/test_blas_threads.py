"""numpy's BLAS pool in a gateway process: capped at VG_BLAS_THREADS (1 by default) while it
serves, as it was when it stops; 0 leaves the library's own count; a bad value is refused
(voice_gateway/native_threads.py says why: the pool's idle threads spin after each call)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from tests.support.gateway import running_gateway
from voice_gateway.native_threads import blas_threads, limit_blas
from voice_gateway.settings import Settings


def _from_a_thread(threads: int) -> None:
    """threadpoolctl lets only one live thread set OpenBLAS's count; a thread that has ended
    leaves it to the next (the gateway's serving thread, here)."""
    t = threading.Thread(target=limit_blas, args=(threads,))
    t.start()
    t.join()


@pytest.fixture
def two_blas_threads() -> Iterator[None]:
    """This process's BLAS at 2 threads (the default on a 2-core machine; set here so that the
    cap is seen to change something on any machine)."""
    before = blas_threads()
    _from_a_thread(2)
    assert blas_threads() and set(blas_threads()) == {2}
    yield
    _from_a_thread(before[0])


def test_capped_while_serving_and_restored(sqlite_url: str, two_blas_threads: object) -> None:
    assert Settings().blas_threads == 1
    with running_gateway(sqlite_url) as server:
        assert httpx.get(f"{server.url}/v1/health/", timeout=10).status_code == 200
        assert set(blas_threads()) == {1}
        a = np.ones((300, 300))
        assert float((a @ a)[0, 0]) == 300.0  # numpy still computes on one thread
    assert set(blas_threads()) == {2}


def test_zero_leaves_the_library_alone(sqlite_url: str, two_blas_threads: object) -> None:
    with running_gateway(sqlite_url, blas_threads=0) as server:
        assert httpx.get(f"{server.url}/v1/health/", timeout=10).status_code == 200
        assert set(blas_threads()) == {2}


@pytest.mark.parametrize("value", ["-1", "65", "many"])
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("VG_BLAS_THREADS", value)
    with pytest.raises(ValidationError, match="blas_threads"):
        Settings()
