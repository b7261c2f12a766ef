"""Start a real gateway (create_app + uvicorn) on a loopback port for integration tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.support.servers import ServerThread
from voice_gateway.app import create_app
from voice_gateway.protocol.uvicorn_http import http_options
from voice_gateway.protocol.uvicorn_ws import ws_protocol
from voice_gateway.settings import Settings


def make_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "openai_api_key": None,
        "openai_base_url": None,
        "deepgram_api_key": None,
        "redis_url": None,
        "api_key": None,
        "voice": False,  # voice tests turn it on (loads whisper + TTS)
        # the test gateway shares its process with the test: its event-loop lag is the test's
        # too (tests/integration/test_admission.py tests admission with its own settings)
        "admit_max_lag_ms": 0,
        # the suite speaks espeak-ng, whose voice never fades, so `smart` holds each turn
        # 1.6 s and `auto` (the default) ends each by its words: the suite's timings are the
        # silence rule's; tests of `smart` and `auto` ask for them
        "turn_detection": "vad",
    }
    values.update(overrides)
    return Settings(**values)


@contextmanager
def running_gateway(database_url: str, **overrides: Any) -> Iterator[ServerThread]:
    settings = make_settings(database_url, **overrides)
    server = ServerThread(
        create_app(settings),
        ws_ping_interval=None,
        ws=ws_protocol(settings.ws_fast_path),
        **http_options(settings),  # as `voice-gateway serve` runs it
    ).start(timeout=120)
    server.settings = settings  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of the gateway's live /metrics (0 when it has none yet); `labels` in the
    order the metric declares them."""
    text = httpx.get(f"{url}/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{want}}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
