"""End-of-turn policies: `vad` (the silence rule), `smart` (Smart Turn v3.2 + the speculative
transcript) and `auto` (the same signals within the silence rule's time: they end a turn
sooner, and only words that run on hold it longer). A new model is one module with an
`EndOfTurn` subclass."""

from __future__ import annotations

KNOWN_TURN_DETECTION = ("auto", "vad", "smart")
# auto: a finished sentence in the transcript ends the turn after this much silence (unless
# VG_TURN_SENTENCE_MS says otherwise): bench/turn_taking.py `--cv`, docs/operations.md
AUTO_SENTENCE_MS = 340
