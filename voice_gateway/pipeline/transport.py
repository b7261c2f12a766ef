"""What a voice session needs from the wire. The browser socket and Twilio Media Streams are
two serializers over one session; neither knows about VAD, STT, the agent or TTS."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.approvals import Answer
from memory.models import Source

# Close codes (RFC 6455 + ours)
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # idle timeout
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_RESTART = 1012  # server shutting down
CLOSE_TRY_LATER = 1013  # this process is at capacity: call again (another instance answers)
CLOSE_UNAUTHORIZED = 4401
CLOSE_POLICY = 1008  # policy violation: a start message whose parameters are refused
CLOSE_FORBIDDEN = 4403  # Origin not allowed
CLOSE_NOT_FOUND = 4404
CLOSE_QUOTA = 4429  # over concurrent calls or out of call minutes


@dataclass(slots=True)
class AudioIn:
    pcm: bytes  # PCM16 LE mono at the input rate


@dataclass(slots=True)
class TextIn:
    text: str
    notes: list[str]


@dataclass(slots=True)
class Played:
    item_id: str
    played_ms: int


@dataclass(slots=True)
class Control:
    kind: str  # "cancel" | "end"


@dataclass(slots=True)
class Notes:
    """Out-of-band caller input for the next turn, e.g. DTMF digits ("caller pressed 1")."""

    notes: list[str]


@dataclass(slots=True)
class Closed:
    code: int


@dataclass(slots=True)
class Answered:
    """The client's answer to a waiting call: `approval.response` or `tool.result`."""

    answer: Answer


Inbound = AudioIn | TextIn | Played | Control | Notes | Closed | Answered


class TransferFailed(Exception):
    """A transfer could not be placed (the carrier refused, or none is possible here)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(slots=True)
class StartInfo:
    input_rate: int
    output_rate: int
    conversation_id: str | None
    agent_id: str
    extra: dict[str, Any]
    caller: str | None = None  # the caller key the client names (trusted only when allowed)


class Transport(ABC):
    source: Source = "voice"
    name = "browser"  # call control's name for it: browser | twilio | webrtc

    @abstractmethod
    async def start(self) -> StartInfo | None:
        """Wait for the client's start message (handling anything sent before it). None: the
        client left or sent something fatal (the transport has closed the socket)."""

    @abstractmethod
    async def receive(self) -> Inbound:
        """The next inbound item; bad frames are answered (error event) and skipped."""

    @abstractmethod
    async def send_event(self, event: dict[str, Any]) -> None:
        """A server event (docs/voice_socket.md shape); serializers drop what their wire lacks."""

    @abstractmethod
    async def send_audio(self, item_id: str, pcm: bytes) -> None:
        """Reply audio, PCM16 LE mono at the output rate."""

    @abstractmethod
    async def clear_audio(self) -> None:
        """Stop playback at once (barge-in)."""

    @abstractmethod
    async def close(self, code: int, reason: str = "") -> None: ...

    def audio_sink(self, sink: Callable[[bytes], bool] | None) -> bool:
        """Offer (None: withdraw) a synchronous sink for audio frames: the transport may call
        `sink(pcm)` as a frame arrives, while `receive` waits with nothing queued, instead of
        returning AudioIn from `receive`; the sink returns False to get it from `receive` after
        all. False: this transport does not."""
        return False

    async def start_within(self, seconds: float) -> StartInfo | None:
        """`start`, but a client that has not started the call after `seconds` (silent, or
        sending only frames that do not start it) is closed 1001 like an idle call."""
        try:
            async with asyncio.timeout(seconds):
                return await self.start()
        except TimeoutError:
            await self.close(CLOSE_GOING_AWAY, "no start message")
            return None

    async def end(self, end_reason: str) -> None:
        """The call ends from our side (call control: `agent_ended`, `transferred`):
        `session.ended` with the reason, then close 1000."""
        await self.send_event({"type": "session.ended", "reason": end_reason})
        await self.close(CLOSE_NORMAL, end_reason)

    async def transfer(self, target: str, destination: str, mode: str, summary: str) -> bool:
        """Hand the caller to `destination` (target `target`'s number or SIP URI). True: the
        caller was moved and the call is over for us; False: the app was asked
        (`transfer.requested`) and the call goes on. Raises TransferFailed."""
        await self.send_event(
            {"type": "transfer.requested", "target": target, "mode": mode, "summary": summary}
        )
        return False

    async def error(self, code: str, message: str, *, fatal: bool = False) -> None:
        await self.send_event({"type": "error", "code": code, "message": message, "fatal": fatal})
