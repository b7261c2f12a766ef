"""What the browser and Twilio transports share: a Starlette WebSocket and closing it once."""

from __future__ import annotations

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from voice_gateway.pipeline.transport import Transport


class SocketTransport(Transport):
    ws: WebSocket
    closed: bool  # the socket is gone or closed by us

    async def close(self, code: int, reason: str = "") -> None:
        """Close with `code`; a peer that already left (or leaves meanwhile) is not an error."""
        if self.closed or self.ws.application_state == WebSocketState.DISCONNECTED:
            self.closed = True
            return
        self.closed = True
        try:
            await self.ws.close(code, reason)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
