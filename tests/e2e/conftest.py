"""A live voice gateway (local whisper STT, espeak-ng TTS) with the loopback fake LLM."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.fake_llm import FakeLLM, default_responder
from tests.support.gateway import running_gateway
from tests.support.servers import ServerThread


@dataclass
class VoiceGateway:
    server: ServerThread
    llm: FakeLLM
    http: httpx.Client

    def agent(self, **body: object) -> str:
        body.setdefault("model", "openai/fake")
        resp = self.http.post("/v1/agents/", json=body)
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    def ws(self, agent_id: str) -> str:
        return f"{self.server.ws_url}/v1/agents/{agent_id}/voice"

    def messages(self, agent_id: str) -> list[dict]:
        """The agent's stored turns, oldest first (its system message left out)."""
        listed = self.http.get(
            f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 500}
        ).json()
        return [m for m in listed if m["message_type"] != "system_message"]


@contextmanager
def voice_gateway_stack(root: Path, **overrides: object) -> Iterator[VoiceGateway]:
    """A voice gateway with its own fake LLM and database under `root`."""
    llm = FakeLLM()
    llm_srv = ServerThread(llm.app).start()
    settings: dict[str, object] = {
        "voice": True,
        "openai_base_url": f"{llm_srv.url}/v1",
        "openai_api_key": "test",
        "idle_timeout_s": 20.0,
        "webrtc_host_addresses": "127.0.0.1",  # WebRTC media on loopback only
        # memory rewriting at call end must not consume the replies a test queued
        "sleeptime_model": "scripted/demo",
        **overrides,
    }
    try:
        with (
            running_gateway(f"sqlite+aiosqlite:///{root / 'vg.db'}", **settings) as srv,
            httpx.Client(base_url=srv.url, timeout=30) as http,
        ):
            yield VoiceGateway(srv, llm, http)
    finally:
        llm_srv.stop()


@pytest.fixture(scope="module")
def voice_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VoiceGateway]:
    with voice_gateway_stack(tmp_path_factory.mktemp("voice")) as stack:
        yield stack


@pytest.fixture
def vg(voice_stack: VoiceGateway) -> VoiceGateway:
    voice_stack.llm.queue.clear()
    voice_stack.llm.requests.clear()
    voice_stack.llm.responder = default_responder
    voice_stack.llm.cancelled = 0
    return voice_stack


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = Path(__file__).resolve().parents[2] / "test-artifacts"
    path.mkdir(exist_ok=True)
    return path
