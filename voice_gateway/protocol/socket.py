"""What the browser and Twilio transports share: a Starlette WebSocket and closing it once."""

from __future__ import annotations

from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from voice_gateway.pipeline.transport import Transport


class SocketTransport(Transport):
    ws: WebSocket
    closed: bool  # the socket is gone or closed by us

    def _extension(self, name: str, key: str) -> Any:
        """A callable of our protocol's ASGI extension `name` (protocol/uvicorn_ws.py), or
        None on another protocol."""
        return ((self.ws.scope.get("extensions") or {}).get(name) or {}).get(key)

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
