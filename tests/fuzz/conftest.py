"""One live gateway per fuzz module: real sockets on loopback, instant fake providers (the
fault providers in their "ok" mode), real SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.fault_providers import FaultLLM, Faults, install
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread

CALL_CODE = ("voice_gateway/pipeline/", "voice_gateway/protocol/", "voice_gateway/routes/")


@dataclass
class Live:
    server: ServerThread
    http: httpx.Client
    agent_id: str

    @property
    def gw(self) -> Any:
        return self.server.app.state.gw  # type: ignore[attr-defined]

    def call_tasks(self) -> int:
        """Tasks on the server running call code (sessions, transports, socket routes)."""

        async def count() -> int:
            codes = [getattr(t.get_coro(), "cr_code", None) for t in asyncio.all_tasks()]
            return sum(
                1 for c in codes if c is not None and any(p in c.co_filename for p in CALL_CODE)
            )

        return int(self.server.call(count()))

    def live_calls(self) -> int:
        return len(self.gw.calls)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    faults = Faults()
    name = install(faults)
    db = tmp_path_factory.mktemp("fuzz") / "vg.db"
    with (
        running_gateway(
            f"sqlite+aiosqlite:///{db}",
            voice=True,
            stt=name,
            tts=name,
            sleeptime_model="scripted/demo",
            rate_limit_rps=0,  # the fuzzers are one client sending fast on purpose
        ) as srv,
        httpx.Client(base_url=srv.url, timeout=30) as http,
    ):
        srv.app.state.gw.llms.overrides["openai"] = FaultLLM(faults, reply="Okay.")  # type: ignore[attr-defined]
        resp = http.post("/v1/agents/", json={"model": "openai/fuzz"})
        assert resp.status_code == 201, resp.text
        yield Live(srv, http, resp.json()["id"])
