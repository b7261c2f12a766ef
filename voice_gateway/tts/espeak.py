"""espeak-ng: always available, 22050 Hz. It runs in-process through libespeak-ng
(tts/espeak_engine.py: one engine per process on its own thread, first audio ~0.2 ms after the
request). The `espeak-ng` program (a process per sentence: ~9 ms before its first audio on an
idle machine, ~20 ms inside a busy gateway) serves when the library is missing, in a forked
child, or when the engine has more than OVERFLOW_WAIT_MS of other calls' text ahead (so one
call's long sentence never holds up another call's filler). Both speak the same audio (the
same flags, voice and rate). Output is resampled as it streams in (the low-delay polyphase
resampler), not after the sentence."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections import Counter
from collections.abc import AsyncIterator

from voice_gateway.tts.base import TTSError, TTSProvider
from voice_gateway.tts.espeak_engine import SAMPLE_RATE, shared_engine
from voice_gateway.tts.libespeak import clean_text

# wait no longer than this for the engine: a new espeak-ng process needs ~9-20 ms to its
# first audio (and a fork of the gateway); the engine synthesizes ~20 characters per ms
OVERFLOW_WAIT_MS = 15.0


class EspeakTTS(TTSProvider):
    name = "espeak"
    native_rate = SAMPLE_RATE
    streams_audio = True

    def __init__(
        self, voice: str = "en-us", speed: int = 170, *, in_process: bool = True, **kw: float
    ) -> None:
        """in_process=False: always the espeak-ng program (benchmark baselines, tests)."""
        super().__init__(**kw)  # type: ignore[arg-type]
        self.voice = voice
        self.speed = speed
        self.in_process = in_process
        self.exe = shutil.which("espeak-ng") or shutil.which("espeak")
        self.served: Counter[str] = Counter()  # "library" / "program": which path spoke

    def _stream(self, text: str) -> AsyncIterator[bytes]:
        # looked up per sentence, not kept: a forked child gets None (and the program)
        engine = shared_engine() if self.in_process else None
        if engine is not None and (
            self.exe is None or engine.expected_wait_ms() <= OVERFLOW_WAIT_MS
        ):
            self.served["library"] += 1
            return engine.synthesize(text, self.voice, self.speed)
        self.served["program"] += 1
        return self._run_program(text)

    async def _run_program(self, text: str) -> AsyncIterator[bytes]:
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
            clean_text(text),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        finished = False
        try:
            header = await _read_header(proc.stdout)
            if header[:4] == b"RIFF":
                while chunk := await proc.stdout.read(8192):
                    yield chunk
            finished = True
        finally:
            if not finished and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()  # the caller went away mid-sentence (barge-in, hang-up)
            # not wait(): on asyncio's own loop it returns only once the pipes are drained,
            # and audio left unread by a caller gone mid-sentence never was (it hung)
            _, err = await proc.communicate()
        if proc.returncode != 0 or header[:4] != b"RIFF":
            why = err.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
            raise TTSError(self.name, f"espeak-ng failed: {why}")


async def _read_header(stdout: asyncio.StreamReader) -> bytes:
    """The 44-byte WAV header, or what came before the end of the output."""
    try:
        return await stdout.readexactly(44)
    except asyncio.IncompleteReadError as exc:
        return exc.partial
