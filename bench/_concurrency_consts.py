"""Constants shared by voice_concurrency.py and its helper modules."""

from __future__ import annotations

CYCLE_S = 8.0  # one user turn per 8 s per call: ~2 s of speech, a reply, a pause
FRAME = 640  # 20 ms at 16 kHz
LONG_SPEECH = "Hello there, how are you doing today?"  # ~2.2 s of speech
SHORT_SPEECH = "Hello, how are you?"  # ~1.2 s: leaves a reply room in a 3 s cycle
ENDPOINT_MS = 200  # the capacity load: 200 ms of silence ends a turn
REPLY_DEADLINE_S = 1.0
LAYOUTS = ("per-call", "one")
