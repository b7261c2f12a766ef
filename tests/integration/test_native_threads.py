"""Native thread pools of a gateway process (docs/operations.md, "Native thread pools"):
numpy's BLAS pool capped at VG_BLAS_THREADS (1 by default) while it serves, as it was when it
stops, 0 leaving the library's own count (voice_gateway/native_threads.py says why: the pool's
idle threads spin after each call); local whisper's VG_STT_WORKERS reaching CTranslate2; bad
values refused."""

from __future__ import annotations

import os
import subprocess
import sys
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


def test_whisper_decodes_as_many_calls_at_once_as_it_has_workers() -> None:
    """From the settings to CTranslate2, in a process of its own (the model is one per
    process): with CTranslate2's default of one worker, calls' decodes took turns on the model
    whatever the size of the decode pool (voice_gateway/stt/whisper.py)."""
    code = (
        "import asyncio\n"
        "from voice_gateway.voice import _stt\n"
        "from voice_gateway.settings import Settings\n"
        "from voice_gateway.stt import whisper\n"
        "stt = _stt(Settings(stt_workers=3, stt_threads=1), 'whisper')\n"
        "asyncio.run(stt.warmup())\n"
        "print(whisper._model.model.num_workers, stt.pool._max_workers)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["3", "3"]
    assert (Settings().stt_workers, Settings().stt_threads) == (2, 1)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("blas_threads", "-1"),
        ("blas_threads", "65"),
        ("blas_threads", "many"),
        ("stt_workers", "0"),
        ("stt_workers", "two"),
        ("stt_threads", "0"),
    ],
)
def test_bad_values_are_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(f"VG_{name.upper()}", value)
    with pytest.raises(ValidationError, match=name):
        Settings()
