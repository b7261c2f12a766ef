"""The gateway's live WebRTC calls: answer an offer, run the call, hang it up.

A call outlives the HTTP request that offered it, so its task belongs to this registry (not
to the request): the registry keeps every task, and `aclose` (gateway shutdown) cancels and
awaits them. Each call's task runs one task group: the inbound audio pump and the call."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiortc import RTCConfiguration, RTCPeerConnection, RTCRtpSender, RTCSessionDescription

from voice_gateway.errors import ApiError
from voice_gateway.pipeline.transport import CLOSE_NORMAL
from voice_gateway.webrtc.ice import IceConfig, pin
from voice_gateway.webrtc.offer import Offer
from voice_gateway.webrtc.transport import WebRTCTransport

log = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class PeerCall:
    id: str
    agent_id: str
    transport: WebRTCTransport
    answer_sdp: str
    task: asyncio.Task[None] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class WebRTCCalls:
    def __init__(self, config: IceConfig, idle_timeout_s: float) -> None:
        self.config = config
        self.idle_timeout_s = idle_timeout_s
        self.live: dict[str, PeerCall] = {}

    async def answer(self, agent_id: str, offer: Offer) -> PeerCall:
        """A peer connection answering `offer` (candidates gathered, no trickle). Raises
        ApiError 400 when aiortc refuses the offer; the caller then owns nothing."""
        pc = RTCPeerConnection(RTCConfiguration(iceServers=list(self.config.servers)))
        transport = WebRTCTransport(pc, agent_id, events=offer.events)
        try:
            await pc.setRemoteDescription(RTCSessionDescription(offer.sdp, "offer"))
            audio = next(t for t in pc.getTransceivers() if t.kind == "audio")
            opus = [
                c
                for c in RTCRtpSender.getCapabilities("audio").codecs
                if c.mimeType.lower() == "audio/opus"
            ]
            audio.setCodecPreferences(opus)
            pc.addTrack(transport.track)
            transport.remote = audio.receiver.track
            pin(pc, self.config)
            await pc.setLocalDescription(await pc.createAnswer())
        except (ValueError, StopIteration, AttributeError) as exc:
            await pc.close()
            raise ApiError(400, f"the offer cannot be answered: {exc}"[:300]) from exc
        except BaseException:
            await pc.close()
            raise
        call_id = f"rtc-{secrets.token_urlsafe(18)}"
        return PeerCall(call_id, agent_id, transport, pc.localDescription.sdp)

    def run(self, call: PeerCall, run_call: Callable[[], Awaitable[None]]) -> None:
        """Start the call's task: the audio pump and `run_call` (the pipeline) together."""
        self.live[call.id] = call
        call.task = asyncio.create_task(self._run(call, run_call), name=f"webrtc {call.id[:12]}")

    async def _run(self, call: PeerCall, run_call: Callable[[], Awaitable[None]]) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                pump = tg.create_task(call.transport.pump(self.idle_timeout_s))
                await run_call()
                pump.cancel()
        except Exception:
            log.exception("webrtc call %s failed", call.id[:12])
        finally:
            await asyncio.shield(call.transport.close(CLOSE_NORMAL, "call ended"))
            self.live.pop(call.id, None)
            call.ended.set()

    async def hang_up(self, call_id: str, timeout_s: float = 15.0) -> PeerCall | None:
        """End the call as if the caller left (the reply is cut, what was said is stored);
        returns once it has ended (or after `timeout_s`). None: no such live call."""
        call = self.live.get(call_id)
        if call is None:
            return None
        call.transport.hang_up()
        try:
            await asyncio.wait_for(call.ended.wait(), timeout_s)
        except TimeoutError:
            log.warning("webrtc call %s did not end within %.0f s", call_id[:12], timeout_s)
        return call

    async def aclose(self) -> None:
        tasks = [c.task for c in self.live.values() if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
