"""espeak-ng: always available, 22050 Hz, ~8 ms to its first audio. Its output is resampled
as it streams out of the process (the low-delay polyphase resampler), not after the sentence."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator

from voice_gateway.tts.base import TTSError, TTSProvider


class EspeakTTS(TTSProvider):
    name = "espeak"
    native_rate = 22050
    streams_audio = True

    def __init__(self, voice: str = "en-us", speed: int = 170, **kw: float) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.voice = voice
        self.speed = speed
        self.exe = shutil.which("espeak-ng") or shutil.which("espeak")

    async def _stream(self, text: str) -> AsyncIterator[bytes]:
        if self.exe is None:
            raise TTSError(self.name, "espeak-ng is not installed (apt-get install espeak-ng)")
        proc = await asyncio.create_subprocess_exec(
            self.exe,
            "-v",
            self.voice,
            "-s",
            str(self.speed),
            "--stdout",
            "--",
            text,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        try:
            header = await proc.stdout.readexactly(44)
            if header[:4] != b"RIFF":
                raise TTSError(self.name, "espeak-ng did not produce a WAV stream")
            while chunk := await proc.stdout.read(8192):
                yield chunk
            if await proc.wait() != 0:
                raise TTSError(self.name, f"espeak-ng exited with {proc.returncode}")
        except asyncio.IncompleteReadError as exc:
            raise TTSError(self.name, "espeak-ng produced no audio") from exc
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
