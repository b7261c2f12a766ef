"""The live call's `CallControl` (agents/tools/call_control.py): what `end_call`,
`transfer_call` and `send_dtmf` do to a voice call. The parts every transport shares live
here; a transport's own part is its hooks (`Transport.end`, `Transport.transfer`).

- end: the reply that asked for it may no longer be interrupted; once it has been heard
  (`Reply.wait_for_playout`) the transport ends the call (`after_reply`), end reason
  `agent_ended`.
- transfer: what the reply said so far is played first (the announcement), then the
  transport hands the caller over (a phone line: end reason `transferred`, the call is over
  for us) or tells the app (`transfer.requested`; the call goes on).
- DTMF: the tones are audio of the reply, after what it has said so far."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from agents.tools.call_control import CallEnding, TransferMode
from agents.tools.registry import ToolError
from voice_gateway.pipeline.dtmf import dtmf_pcm
from voice_gateway.pipeline.transport import TransferFailed, Transport

if TYPE_CHECKING:
    from voice_gateway.pipeline.reply import Reply

log = logging.getLogger(__name__)
AGENT_ENDED = "agent_ended"
TRANSFERRED = "transferred"


class Controlled(Protocol):
    """The call as its control acts on it (VoiceSession)."""

    transport: Transport
    reply: Reply | None  # the reply under way (the one whose tool is running)
    output_rate: int
    closing: bool  # queued and new turns are dropped


class SessionCallControl:
    def __init__(self, call: Controlled) -> None:
        self._call: Controlled | None = call
        self.name = call.transport.name
        self.ending: str | None = None  # the end reason once the call is ending
        self.reason = ""  # the model's words for why it ended the call

    @property
    def call(self) -> Controlled:
        if self._call is None:
            raise ToolError("the call has ended")
        return self._call

    def detach(self) -> None:
        """The call is over: let go of it (no reference cycle keeps it alive)."""
        self._call = None

    @property
    def transport(self) -> str:
        return self.name

    def end_after_reply(self, reason: str) -> None:
        if self.ending is not None:
            raise CallEnding(self.ending)
        self.ending, self.reason = AGENT_ENDED, reason
        reply = self.call.reply
        if reply is not None:
            reply.allow_interruptions = False  # the goodbye is heard whole

    async def transfer(
        self, target: str, destination: str, mode: TransferMode, summary: str
    ) -> str:
        if self.ending is not None:
            raise ToolError("the call is already ending")
        reply = self.call.reply
        if reply is not None:
            await reply.wait_for_said()  # the announcement first
        try:
            moved = await self.call.transport.transfer(target, destination, mode, summary)
        except TransferFailed as exc:
            log.warning("transfer to %s failed: %s", target, exc.detail)
            raise ToolError(f"the transfer to {target} failed: {exc.detail}") from exc
        if not moved:
            return f"The app was asked to transfer the call to {target} ({mode})."
        self.ending = TRANSFERRED
        return f"The caller was transferred to {target}; the call is over. Say nothing more."

    async def send_dtmf(self, digits: str) -> None:
        reply = self.call.reply
        if reply is None:
            raise ToolError("no reply is being played")
        reply.speaker.play(digits, dtmf_pcm(digits, self.call.output_rate), "dtmf")

    async def after_reply(self, reply: Reply, *, cut: bool) -> None:
        """A reply is over (`cut`: interrupted): end the call if it was asked to, once its
        goodbye has been heard."""
        if self.ending is None:
            return
        self.call.closing = True  # what the caller says meanwhile is not answered
        if not cut and self.ending == AGENT_ENDED:
            await reply.wait_for_playout()
        log.info("call ending: %s", self.ending)
        await self.call.transport.end(self.ending)
