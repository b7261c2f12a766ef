"""A speakerphone for echo tests: the caller's device plays the gateway's reply in real time and
its microphone hears it back after `delay_ms`, attenuated, with background noise, mixed with
whatever the caller says. Works for the browser socket (16 kHz PCM16) and Twilio (8 kHz)."""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets

from tests.support.phone import FRAME, TwilioCall, pcm_to_ulaw
from tests.support.voice_client import VoiceClient
from voice_gateway.audio import ulaw_decode


@dataclass
class Speakerphone:
    rate: int
    delay_ms: int = 80
    gain: float = 0.35  # the echo ~9 dB below the reply
    noise_dbfs: float = -55.0
    seed: int = 7
    playing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    speech: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int16))
    delay_line: np.ndarray | None = None
    echoed_samples: int = 0  # reply samples that reached the microphone

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.delay_line = np.zeros(self.delay_ms * self.rate // 1000, dtype=np.float64)

    def received(self, pcm: np.ndarray) -> None:
        self.playing = np.concatenate([self.playing, pcm.astype(np.int16)])

    def clear(self) -> None:
        self.playing = np.zeros(0, dtype=np.int16)

    def say(self, pcm: np.ndarray) -> None:
        self.speech = np.concatenate([self.speech, pcm.astype(np.int16)])

    def frame(self) -> np.ndarray:
        """The microphone's next 20 ms."""
        n = self.rate // 50
        out, self.playing = self.playing[:n], self.playing[n:]
        self.echoed_samples += len(out)
        played = np.zeros(n)
        played[: len(out)] = out
        assert self.delay_line is not None
        line = np.concatenate([self.delay_line, played])
        heard, self.delay_line = line[:n], line[n:]
        mic = heard * self.gain + self.rng.normal(0, 32768 * 10 ** (self.noise_dbfs / 20), n)
        said, self.speech = self.speech[:n], self.speech[n:]
        mic[: len(said)] += said
        return np.clip(mic, -32768, 32767).astype(np.int16)


async def browser_speakerphone(c: VoiceClient, room: Speakerphone, seconds: float) -> None:
    """Run the speakerphone on a browser-socket call for `seconds` (20 ms frames, real time)."""
    assert c.ws is not None
    cursor, clears = 0, 0  # the device plays everything it received
    t0 = time.monotonic()
    for k in range(int(seconds * 50)):
        delay = t0 + k * 0.02 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n_clear = len(c.of_type("audio.clear"))
        if n_clear != clears:
            clears, cursor = n_clear, len(c.audio)
            room.clear()
        new = bytes(c.audio[cursor:])
        new = new[: len(new) - len(new) % 2]
        cursor += len(new)
        room.received(np.frombuffer(new, dtype="<i2"))
        await c.ws.send(room.frame().tobytes())


@dataclass
class SpeakerphoneCall(TwilioCall):
    """A Twilio call whose line carries the speakerphone's microphone."""

    room: Speakerphone = field(default_factory=lambda: Speakerphone(8000))

    async def _line(self) -> None:
        t0 = time.monotonic()
        n = 0
        while True:
            n += 1
            delay = t0 + n * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await self.send(self.media_message(pcm_to_ulaw(self.room.frame())[:FRAME]))
            except websockets.ConnectionClosed:
                return

    def _play(self, now: float, msg: dict[str, Any]) -> None:
        super()._play(now, msg)
        if msg.get("event") == "media":
            self.room.received(ulaw_decode(base64.b64decode(msg["media"]["payload"])))
        elif msg.get("event") == "clear":
            self.room.clear()
