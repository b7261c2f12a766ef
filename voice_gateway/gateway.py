"""The gateway's shared state: one `Gateway` per process, on `app.state.gw`. Routes and the call
pipeline take it from here; `app.py` only composes it (and nothing imports `app.py` back).

Every field is a component with its own type. The components do not import this module: they
are given what they need (settings, memory, metrics) when `app.py` builds them, so the gateway
sits above them and the routes and calls above it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

from agents.llm import LLMRegistry
from agents.loop import AgentLoop
from agents.memory_events import MemoryEvents
from memory.service import Memory
from voice_gateway.auth import Auth
from voice_gateway.bus_runtime import BusRuntime
from voice_gateway.capacity import Capacity
from voice_gateway.file_jobs import FileJobs
from voice_gateway.live_calls import LiveCalls
from voice_gateway.metrics import Metrics
from voice_gateway.quotas import Quotas
from voice_gateway.run_callbacks import RunCallbacks
from voice_gateway.run_mirror import RunMirror
from voice_gateway.runs import ConversationRuns
from voice_gateway.settings import Settings
from voice_gateway.webhooks import CallWebhooks

if TYPE_CHECKING:  # loaded only with VG_VOICE (the speech models and aiortc)
    from voice_gateway.pipeline.services import VoiceServices
    from voice_gateway.webrtc.calls import WebRTCCalls


@dataclass
class Gateway:
    """Everything a request or call needs; one per process, on `app.state.gw`."""

    settings: Settings
    memory: Memory
    llms: LLMRegistry
    loop: AgentLoop
    auth: Auth
    memory_events: MemoryEvents
    metrics: Metrics
    capacity: Capacity  # this process's admission of new calls
    bus: BusRuntime  # the transcript bus (Redis, or in process)
    quotas: Quotas  # rate limits and quotas per identity
    file_jobs: FileJobs  # uploaded files' background processing
    run_callbacks: RunCallbacks
    runs: ConversationRuns = field(default_factory=ConversationRuns)
    run_mirror: RunMirror | None = None  # background runs' frames in Redis, when configured
    voice: VoiceServices | None = None  # with VG_VOICE: STT, TTS, VAD, end of turn
    webrtc: WebRTCCalls | None = None
    calls: LiveCalls = field(default_factory=LiveCalls)
    call_webhooks: CallWebhooks | None = None  # with VG_CALL_WEBHOOK_URL: `call.ended` sender
    tools_refused: str | None = None  # why custom tools are refused (no isolation), if they are
    draining: bool = False  # shutting down: /ready says 503, new calls are refused with 1012

    def default_model(self) -> str:
        return self.settings.default_model or self.llms.default_handle()


def gateway_of(conn: HTTPConnection) -> Gateway:
    """The process's gateway, for a request or a socket."""
    gw: Gateway = conn.app.state.gw
    return gw
