"""libespeak-ng in-process: one engine per process, owned by one worker thread.

The library is a process-global engine and not thread-safe, so a single daemon thread
initializes it and runs every synthesis, one job at a time, in AUDIO_OUTPUT_SYNCHRONOUS mode:
`espeak_Synth` runs on that thread (without the GIL) and calls our callback with each buffer
(60 ms of PCM16) as it is produced; the callback hands the buffer to the caller's event loop
(call_soon_threadsafe), so the first audio arrives while the rest of the sentence is still
being synthesized. A job whose caller went away (barge-in, client gone, time-out, its event
loop closed) is skipped if still queued, and stopped at its next buffer (the callback returns
1, espeak's own way to stop) if running. `expected_wait_ms()` tells a caller how long the
engine would keep it waiting (tts/espeak.py runs the espeak-ng program instead when that is
too long). A forked child does not inherit the worker thread: it uses the program.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import math
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from voice_gateway.tts.base import TTSError
from voice_gateway.tts.libespeak import (
    AUDIO_OUTPUT_SYNCHRONOUS,
    EE_OK,
    ESPEAK_RATE,
    INITIALIZE_DONT_EXIT,
    POS_CHARACTER,
    SYNTH_FLAGS,
    EspeakVoice,
    SynthCallback,
    encode_text,
    load_library,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 22050  # espeak-ng's voices (the program's WAV header says the same)
BUFFER_MS = 60  # audio per callback: ~0.2 ms of synthesis each


@dataclass(slots=True, eq=False)
class Job:
    text: bytes
    voice: str
    speed: int
    loop: asyncio.AbstractEventLoop
    chunks: asyncio.Queue[bytes | Exception | None] = field(default_factory=asyncio.Queue)
    cancelled: bool = False  # set by the caller; the worker stops at its next buffer
    started: bool = False
    aborted: bool = False  # stopped mid-text because it was cancelled
    samples: int = 0  # produced so far (for tests and logs)

    @property
    def chars(self) -> int:
        return len(self.text)

    def deliver(self, item: bytes | Exception | None) -> bool:
        """Hand an item to the caller's loop; False when that loop is gone."""
        try:
            self.loop.call_soon_threadsafe(self.chunks.put_nowait, item)
        except RuntimeError:  # the loop was closed: nobody is listening any more
            self.cancelled = True
            return False
        return True


class Engine:
    """The process's libespeak-ng, driven by one worker thread; use `shared_engine()`."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.ms_per_char = 0.05  # synthesis cost, re-measured on every job (moving average)
        self.counts: Counter[str] = Counter()  # jobs done / aborted / skipped / failed
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _queued_chars, _current, _started_at
        self._queued_chars = 0
        self._current: Job | None = None
        self._started_at = 0.0
        self._voice: tuple[str, int] | None = None  # selected in the library (worker only)
        self._callback = SynthCallback(self._on_audio)  # kept: ctypes must not free it
        self._ready = threading.Event()
        self._error: str | None = None
        self._thread = threading.Thread(target=self._run, name="libespeak-ng", daemon=True)

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the worker and wait for the library to initialize; raises TTSError."""
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TTSError("espeak", "libespeak-ng did not initialize in time")
        if self._error is not None:
            raise TTSError("espeak", self._error)

    def expected_wait_ms(self) -> float:
        """How long a job submitted now would wait for the engine: the text queued ahead of it
        at the measured cost per character (inf if the running job is far past its estimate:
        the engine may be stuck)."""
        with self._lock:
            current, queued, started = self._current, self._queued_chars, self._started_at
        wait = queued * self.ms_per_char
        if current is not None:
            left = current.chars * self.ms_per_char - (time.perf_counter() - started) * 1000
            if left < -100.0:
                return math.inf
            wait += max(left, 0.0)
        return wait

    def submit(self, text: str, voice: str, speed: int) -> Job:
        job = Job(encode_text(text), voice, speed, asyncio.get_running_loop())
        with self._lock:
            self._queued_chars += job.chars
        self._jobs.put(job)
        return job

    async def synthesize(self, text: str, voice: str, speed: int) -> AsyncIterator[bytes]:
        """PCM16 mono at SAMPLE_RATE, chunk by chunk as the engine produces it."""
        job = self.submit(text, voice, speed)
        try:
            while (item := await job.chunks.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            job.cancelled = True  # done, failed or abandoned: the worker stops or skips it

    # ---- the worker thread ------------------------------------------------------------------

    def _run(self) -> None:
        rate = self.lib.espeak_Initialize(
            AUDIO_OUTPUT_SYNCHRONOUS, BUFFER_MS, None, INITIALIZE_DONT_EXIT
        )
        if rate != SAMPLE_RATE:
            self._error = f"libespeak-ng failed to initialize (sample rate {rate})"
            self._ready.set()
            return
        self.lib.espeak_SetSynthCallback(self._callback)
        self._ready.set()
        while True:
            job = self._jobs.get()
            with self._lock:
                self._queued_chars -= job.chars
                if job.cancelled:
                    self.counts["skipped"] += 1
                    continue
                self._current, self._started_at = job, time.perf_counter()
            try:
                self._synthesize(job)
            except Exception as exc:  # the caller gets it, the worker goes on
                self.counts["failed"] += 1
                job.deliver(exc if isinstance(exc, TTSError) else TTSError("espeak", repr(exc)))
            finally:
                with self._lock:
                    self._current = None

    def _synthesize(self, job: Job) -> None:
        job.started = True
        self._select_voice(job.voice, job.speed)
        t0 = time.perf_counter()
        status = self.lib.espeak_Synth(
            job.text, len(job.text), 0, POS_CHARACTER, 0, SYNTH_FLAGS, None, None
        )
        if job.aborted:  # stopped by the callback
            self.counts["aborted"] += 1
            return
        if status != EE_OK:
            raise TTSError("espeak", f"espeak_Synth failed with status {status}")
        if job.chars >= 16:
            per_char = (time.perf_counter() - t0) * 1000 / job.chars
            self.ms_per_char += 0.2 * (per_char - self.ms_per_char)
        self.counts["done"] += 1
        job.deliver(None)

    def _select_voice(self, voice: str, speed: int) -> None:
        """As the espeak-ng command line does: the voice by name, else by language ("en-us"),
        then the rate."""
        if self._voice == (voice, speed):
            return
        self._voice = None
        name = voice.encode("utf-8", "replace")
        if self.lib.espeak_SetVoiceByName(name) != EE_OK:
            spec = EspeakVoice(languages=name)
            if self.lib.espeak_SetVoiceByProperties(ctypes.byref(spec)) != EE_OK:
                raise TTSError("espeak", f"no espeak-ng voice {voice!r}")
        self.lib.espeak_SetParameter(ESPEAK_RATE, speed, 0)
        self._voice = (voice, speed)

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], numsamples: int, _ev: int) -> int:
        """Called by espeak_Synth on the worker thread: 0 = go on, 1 = stop."""
        job = self._current
        if job is None or job.cancelled:
            return self._abort(job)
        if wav and numsamples > 0:  # NULL = end of the text; 0 samples happens mid-way
            try:
                pcm = ctypes.string_at(wav, numsamples * 2)
            except Exception:  # never raise into C: stop this text instead
                log.exception("libespeak-ng callback failed")
                return self._abort(job)
            job.samples += numsamples
            if not job.deliver(pcm):
                return self._abort(job)
        return 0

    @staticmethod
    def _abort(job: Job | None) -> int:
        if job is not None:
            job.cancelled = job.aborted = True
        return 1


_ENGINE: Engine | None = None
_UNAVAILABLE: str | None = None
_ENGINE_LOCK = threading.Lock()


def shared_engine() -> Engine | None:
    """This process's engine, started on first use; None (and the reason logged once) when
    libespeak-ng cannot be loaded or initialized, or in a forked child: callers then run
    the espeak-ng program."""
    global _ENGINE, _UNAVAILABLE
    with _ENGINE_LOCK:
        if _ENGINE is not None or _UNAVAILABLE is not None:
            return _ENGINE
        lib = load_library()
        if lib is None:
            _UNAVAILABLE = "libespeak-ng is not installed (apt-get install libespeak-ng1)"
        else:
            engine = Engine(lib)
            try:
                engine.start()
                _ENGINE = engine
            except TTSError as exc:
                _UNAVAILABLE = exc.message
        if _UNAVAILABLE is not None:
            log.warning("%s; espeak speaks through the espeak-ng program instead", _UNAVAILABLE)
        return _ENGINE


def _forget_in_child() -> None:
    """A forked child has the library's memory (perhaps mid-synthesis) but not its worker
    thread: it uses the espeak-ng program instead."""
    global _ENGINE, _UNAVAILABLE, _ENGINE_LOCK
    _ENGINE_LOCK = threading.Lock()  # the fork may have happened while it was held
    if _ENGINE is not None:
        _ENGINE, _UNAVAILABLE = None, "a forked process cannot use its parent's libespeak-ng"


os.register_at_fork(after_in_child=_forget_in_child)
