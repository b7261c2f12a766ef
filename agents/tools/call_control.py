"""What the call tools (agents/tools/call_tools.py) ask of the live call: `CallControl`.

A voice turn's `TurnInput.call` (and so `ToolContext.call`) is its call's `CallControl`
(voice_gateway/pipeline/call_control.py); text turns and sleeptime have none."""

from __future__ import annotations

from typing import Literal, Protocol

TransferMode = Literal["cold", "warm"]


class CallEnding(Exception):
    """The call is already ending (a second `end_call`, or after a transfer)."""


class CallControl(Protocol):
    """What the call tools ask of the live call (voice_gateway/pipeline/call_control.py)."""

    @property
    def transport(self) -> str:
        """The call's transport: `twilio`, `browser` or `webrtc`."""
        ...

    def end_after_reply(self, reason: str) -> None:
        """End the call once the current reply has been played to the caller; raises
        `CallEnding` if it is already ending."""
        ...

    async def transfer(
        self, target: str, destination: str, mode: TransferMode, summary: str
    ) -> str:
        """Hand the caller to `destination` (the number or SIP URI of the target `target`),
        once what was said so far has been played; what happened, for the model. Raises
        `ToolError` when it could not be done (the call goes on)."""
        ...

    async def send_dtmf(self, digits: str) -> None:
        """Play the keypad tones of `digits` (already checked) into the call's audio."""
        ...
