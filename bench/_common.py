"""Shared helpers for the benchmarks: percentiles, argument parsing, JSON output.

Every benchmark prints one JSON object on stdout (and saves a copy under bench/results/).
Run a benchmark as `.venv/bin/python bench/<name>.py [--quick]`; it imports these helpers with
`from _common import ...` (the script's own folder is first on sys.path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# where results and server logs go (VG_BENCH_RESULTS: elsewhere, e.g. the smoke tests' tmp dir)
RESULTS = Path(os.environ.get("VG_BENCH_RESULTS") or ROOT / "bench" / "results")
if str(ROOT) not in sys.path:  # `python bench/x.py` from a checkout
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def summary(samples_ms: Sequence[float]) -> dict[str, float | int]:
    """n, mean, p50, p95, p99 and max of timings in milliseconds (rounded to µs)."""
    if not samples_ms:
        return {"n": 0}
    a = np.asarray(samples_ms, dtype=np.float64)
    return {
        "n": int(a.size),
        "mean_ms": round(float(a.mean()), 3),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def ratio(value: float, baseline: float) -> float | None:
    return round(value / baseline, 3) if baseline else None


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short run (CI smoke / development)")
    return p


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(terse=True),
    }


def emit(name: str, result: dict[str, Any]) -> None:
    """Print the result as JSON and keep a copy in bench/results/<name>.json."""
    out = {"bench": name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **result}
    out.setdefault("machine", machine())
    text = json.dumps(out, indent=2)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(text + "\n")


class Timer:
    """`with Timer() as t: ...` then `t.ms`."""

    def __enter__(self) -> Timer:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ms = (time.perf_counter() - self._t0) * 1000


def postgres_admin_url() -> str | None:
    """A PostgreSQL server to benchmark against: VG_BENCH_POSTGRES_URL / VG_TEST_POSTGRES_URL,
    else one answering on 127.0.0.1:5432 (user postgres), else None."""
    import socket

    url = os.environ.get("VG_BENCH_POSTGRES_URL") or os.environ.get("VG_TEST_POSTGRES_URL")
    if url:
        return url.replace("postgresql+asyncpg://", "postgresql://")
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=0.5).close()
    except OSError:
        return None
    return "postgresql://postgres@127.0.0.1:5432/postgres"


class TempPostgresDatabases:
    """Fresh PostgreSQL databases for a synchronous benchmark (gateways in child processes):
    `new()` creates one and returns its async URL; `drop_all()` drops every one made."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.names: list[str] = []

    def new(self) -> str:
        name, url = _fresh(self.admin_url)
        asyncio.run(_admin(self.admin_url, f'CREATE DATABASE "{name}"'))
        self.names.append(name)
        return url

    def drop_all(self) -> None:
        for name in self.names:
            asyncio.run(_admin(self.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.names = []


def _fresh(admin_url: str) -> tuple[str, str]:
    """A new database name on the server of `admin_url`, and its async URL."""
    import uuid

    name = f"vg_bench_{uuid.uuid4().hex[:10]}"
    base = admin_url.rsplit("/", 1)[0].split("://", 1)[1]
    return name, f"postgresql+asyncpg://{base}/{name}"


async def _admin(admin_url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def temp_postgres(admin_url: str) -> AsyncIterator[str]:
    """A fresh database on the server of `admin_url` for the duration; yields its async URL."""
    name, url = _fresh(admin_url)
    await _admin(admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield url
    finally:
        await _admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
