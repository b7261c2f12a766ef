"""Echo cancellation: remove the reply's own voice from the caller's microphone audio.

`far(pcm)`: audio the caller is being sent (16 kHz PCM16, any length), the reference signal.
`near(frame)`: the caller's next 20 ms frame at 16 kHz PCM16; returns it with the echo of the
reference removed (same length). Called on the event loop once per frame, before VAD, turn
detection and STT: it must be cheap (well under a millisecond).
The far end is consumed at the pace of the near end (one 20 ms frame of reference per
microphone frame), which is the pace the caller plays it at; `clear()` drops reference the
caller will no longer hear (barge-in: audio.clear)."""

from __future__ import annotations

from abc import ABC, abstractmethod


class EchoCanceller(ABC):
    name = "echo"
    cancelled_s = 0.0  # microphone audio processed against reply audio (seconds)

    @abstractmethod
    def far(self, pcm: bytes) -> None: ...

    @abstractmethod
    def near(self, frame: bytes) -> bytes: ...

    def clear(self) -> None:
        return None

    @property
    def active(self) -> bool:
        """Reference audio is still playing (what the canceller removes may be echo)."""
        return False

    def energy(self) -> tuple[float, float]:
        """Running totals of the microphone's energy before and after cancellation; between
        two readings, their ratio says how much of what was heard was removed as echo."""
        return (0.0, 0.0)


class NoCanceller(EchoCanceller):
    name = "off"

    def far(self, pcm: bytes) -> None:
        return None

    def near(self, frame: bytes) -> bytes:
        return frame
