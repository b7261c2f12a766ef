"""Deepgram Aura over the speak.v1 WebSocket (deepgram-sdk 7.x; optional extra).

A sentence is one Speak + Flush; its audio ends with a Flushed message. Sockets that finished a
sentence cleanly go back to a small per-process pool and serve the next sentence (of any call),
saving the WebSocket handshake; a sentence cut off by barge-in closes its socket instead."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from voice_gateway.tts.base import TTSError, TTSProvider

log = logging.getLogger(__name__)


def deepgram_client(api_key: str | None, base_url: str | None) -> Any:
    """The SDK's async client; `base_url` points every endpoint at one host (tests: loopback)."""
    try:
        from deepgram import AsyncDeepgramClient
        from deepgram.environment import DeepgramClientEnvironment
    except ImportError as exc:
        raise RuntimeError(
            "Deepgram needs the `deepgram` extra: pip install 'voice-gateway[deepgram]'"
        ) from exc
    if base_url:
        ws = base_url.replace("http://", "ws://").replace("https://", "wss://")
        env = DeepgramClientEnvironment(base=base_url, production=ws, agent=ws, agent_rest=base_url)
        return AsyncDeepgramClient(api_key=api_key or "", environment=env)
    return AsyncDeepgramClient(api_key=api_key or "")


class DeepgramTTS(TTSProvider):
    name = "deepgram"
    native_rate = 24000
    streams_audio = True
    max_idle = 4  # pooled sockets
    idle_s = 8.0  # Deepgram closes a silent speak socket after a while; don't reuse old ones

    def __init__(
        self, *, api_key: str | None, base_url: str | None, model: str = "aura-2-thalia-en"
    ) -> None:
        super().__init__()
        if not api_key:
            raise ValueError("VG_TTS=deepgram needs DEEPGRAM_API_KEY")
        self.model = model
        self.client = deepgram_client(api_key, base_url)
        self._idle: list[tuple[Any, Any, float]] = []  # (context manager, socket, idle since)
        self.opened = 0

    async def _acquire(self) -> tuple[Any, Any]:
        from deepgram.core.api_error import ApiError

        while self._idle:
            cm, conn, since = self._idle.pop()
            if time.monotonic() - since < self.idle_s:
                return cm, conn
            await _close(cm)
        cm = self.client.speak.v1.connect(
            model=self.model, encoding="linear16", sample_rate=self.native_rate
        )
        try:
            conn = await cm.__aenter__()
        except ApiError as exc:
            raise TTSError(self.name, f"connection refused (HTTP {exc.status_code})") from exc
        self.opened += 1
        return cm, conn

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        from deepgram.speak.v1.types import SpeakV1Text

        cm, conn = await self._acquire()
        clean = False
        try:
            await conn.send_text(SpeakV1Text(type="Speak", text=text))
            await conn.send_flush()
            while True:
                msg = await conn.recv()
                if isinstance(msg, bytes):
                    yield msg
                    continue
                kind = getattr(msg, "type", None)
                if kind == "Flushed":
                    clean = True
                    return
                if kind == "Warning":
                    raise TTSError(self.name, str(getattr(msg, "description", msg)))
        except TTSError:
            raise
        except Exception:
            await self._clear_pool()  # a dead pooled socket: the others are likely dead too
            raise
        finally:
            if clean and len(self._idle) < self.max_idle:
                self._idle.append((cm, conn, time.monotonic()))
            else:
                await _close(cm, conn, abort=not clean)

    async def _clear_pool(self) -> None:
        idle, self._idle = self._idle, []
        for cm, _conn, _since in idle:
            await _close(cm)

    async def warmup(self) -> None:
        return None

    async def aclose(self) -> None:
        await self._clear_pool()


async def _close(cm: Any, conn: Any = None, *, abort: bool = False) -> None:
    """Close a socket. `abort`: a sentence cut off mid-way (barge-in) must not wait for the
    close handshake (one round trip to Deepgram) before the caller's audio is cleared."""
    ws = getattr(conn, "_websocket", None)
    if abort and ws is not None and getattr(ws, "transport", None) is not None:
        ws.transport.abort()
    with contextlib.suppress(Exception):
        await cm.__aexit__(None, None, None)
