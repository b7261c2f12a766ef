"""webrtcvad (the webrtcvad-wheels package): ~2.5 µs per frame; mode 3 is the strictest.

After digital silence (all-zero frames: a muted microphone, a DTX phone leg, a client that
sends zeros between turns) webrtcvad's noise estimate sinks, and the caller's room tone that
comes back with the next words then reads as speech: in one call of the 13 pocketsphinx
recordings with digital silence between them, the end of speech came 220-780 ms after the
last word for five of them, against -60 to 120 ms on a fresh detector (docs/benchmarks.md,
voice_latency). So when sound resumes after `RESET_AFTER_ZEROS_MS` of all-zero frames in a
row, the detector starts afresh (a fact of webrtcvad's noise estimate, not of turn-taking:
it is this VAD's constant, not a `TurnConfig` field).

An all-zero frame is never speech. webrtcvad's hangover calls the first 80-120 ms of digital
silence after speech voiced (espeak-ng's sentences followed by zeros: 4-6 frames), so the
silence rule's 400 ms started that much after the caller's last sound, and a client that
sends zeros when its caller stops (a muted or WAV-playing client, Twilio's silence bytes 0xFF,
which decode to 0) waited ~100 ms more for every reply than the gateway's own
`voice_to_voice_ms` showed (bench/voice_latency.py: client 513 against 412 ms). webrtcvad
still sees the zero frames, so its state evolves as before."""

from __future__ import annotations

import webrtcvad

from voice_gateway.vad.base import VAD

_VALID = {320, 640, 960}  # 10/20/30 ms at 16 kHz, bytes
RESET_AFTER_ZEROS_MS = 200


class WebRtcVAD(VAD):
    name = "webrtc"

    def __init__(self, mode: int = 3) -> None:
        if mode not in (0, 1, 2, 3):
            raise ValueError("webrtc VAD mode must be 0-3")
        self.mode = mode
        self._vad = webrtcvad.Vad(mode)
        self._zero_ms = 0  # all-zero audio in a row (any frame size)

    def is_speech(self, frame: bytes) -> bool:
        if len(frame) not in _VALID:
            raise ValueError(f"webrtc VAD needs 10/20/30 ms frames, got {len(frame)} bytes")
        zero = frame.count(0) == len(frame)
        if zero:
            self._zero_ms += len(frame) // 32
        elif self._zero_ms:
            if self._zero_ms >= RESET_AFTER_ZEROS_MS:
                self.reset()
            self._zero_ms = 0
        return bool(self._vad.is_speech(frame, self.sample_rate)) and not zero

    def reset(self) -> None:
        self._vad, self._zero_ms = webrtcvad.Vad(self.mode), 0
