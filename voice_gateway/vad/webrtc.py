"""webrtcvad (the webrtcvad-wheels package): ~2.5 µs per frame; mode 3 is the strictest."""

from __future__ import annotations

import webrtcvad

from voice_gateway.vad.base import VAD

_VALID = {320, 640, 960}  # 10/20/30 ms at 16 kHz, bytes


class WebRtcVAD(VAD):
    name = "webrtc"

    def __init__(self, mode: int = 3) -> None:
        if mode not in (0, 1, 2, 3):
            raise ValueError("webrtc VAD mode must be 0-3")
        self._vad = webrtcvad.Vad(mode)

    def is_speech(self, frame: bytes) -> bool:
        if len(frame) not in _VALID:
            raise ValueError(f"webrtc VAD needs 10/20/30 ms frames, got {len(frame)} bytes")
        return bool(self._vad.is_speech(frame, self.sample_rate))
