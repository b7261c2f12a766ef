"""The gateway's shared state: one `Gateway` per process, on `app.state.gw`. Routes, metrics,
quotas and the bus runtime take it from here; `app.py` only composes it (and nothing imports
`app.py` back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from agents.llm import LLMRegistry
from agents.loop import AgentLoop
from agents.memory_events import MemoryEvents
from memory.service import Memory
from voice_gateway.auth import Auth
from voice_gateway.capacity import Capacity
from voice_gateway.metrics import Metrics
from voice_gateway.settings import Settings

if TYPE_CHECKING:
    from voice_gateway.pipeline.services import VoiceServices
    from voice_gateway.quotas import Quotas
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
    voice: VoiceServices | None = None
    metrics: Metrics = field(default_factory=Metrics)
    capacity: Capacity = field(default_factory=lambda: Capacity(0, 0.0))  # admission
    quotas: Quotas | None = None
    webrtc: WebRTCCalls | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def default_model(self) -> str:
        return self.settings.default_model or self.llms.default_handle()


def gateway_of(conn: HTTPConnection) -> Gateway:
    """The process's gateway, for a request or a socket."""
    gw: Gateway = conn.app.state.gw
    return gw
