"""End-of-turn policies: `vad` (the silence rule) and `smart` (Smart Turn v3.2 + the
speculative transcript). A new model is one module with an `EndOfTurn` subclass."""

from __future__ import annotations

KNOWN_TURN_DETECTION = ("vad", "smart")
