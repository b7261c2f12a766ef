"""VAD factory: `webrtc` (default) or `silero`."""

from __future__ import annotations

from voice_gateway.vad.base import VAD

KNOWN_VADS = ("webrtc", "silero")


def create_vad(name: str, mode: int = 3) -> VAD:
    if name == "webrtc":
        from voice_gateway.vad.webrtc import WebRtcVAD

        return WebRtcVAD(mode)
    if name == "silero":
        from voice_gateway.vad.silero import SileroVAD

        return SileroVAD()
    raise ValueError(f"unknown VAD {name!r}; known: {', '.join(KNOWN_VADS)}")
