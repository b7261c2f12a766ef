"""Voice activity detection: is this 20 ms frame of 16 kHz PCM16 speech?"""

from __future__ import annotations

from abc import ABC, abstractmethod


class VAD(ABC):
    sample_rate = 16000
    name = "vad"

    @abstractmethod
    def is_speech(self, frame: bytes) -> bool:
        """`frame`: 10, 20 or 30 ms of PCM16 LE mono at 16 kHz."""

    def reset(self) -> None:
        return None
