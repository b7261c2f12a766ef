"""The model signal: Smart Turn v3.2 (BSD-2-Clause, int8 ONNX, 8.7 MB) on onnxruntime, asked
at a pause whether the caller sounds finished.

The model file ships inside the `pipecat-ai` 1.14.0 wheel, installed with `--no-deps`; nothing
of pipecat is imported. Measured (one thread): features ~1-6.5 ms for the columns that reach
a 1-4 s utterance (turns/features.py, a Zen 3) instead of ~24 ms for the 8 s window,
inference ~30-40 ms on the 8 s window and 16-33 ms on a window cut to the utterance
(turns/window.py), no gain from batching. So the model runs at most once per pause, on a
small process-wide pool (`SmartTurnModel`), features and all: the event loop only keeps the
call's audio. A pause that finds every worker busy waits for one only while the runs ahead of
it should be done within `queue_ms` (`TurnConfig.queue_ms`, half the verdict's budget),
judged by the recent inference times; otherwise it is decided by the silence rule (counted as
`fallback:busy`): when every pause that found the pool full fell back, at 24-48 calls of real
speech 3-10 % of turns did, each ending ~200 ms later than the model would have
(docs/benchmarks.md, `turn_capacity`). `ModelSignal` is one call's use of it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.features import N_FRAMES, columns_of, window_features
from voice_gateway.turns.int8 import for_this_cpu
from voice_gateway.turns.window import CONTEXT, cut_models, window_for

log = logging.getLogger(__name__)

MODEL_PACKAGE = "pipecat-ai==1.14.0"
MODEL_FILE = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"


def find_model() -> Path | None:
    """The ONNX file from the installed pipecat-ai distribution, or None."""
    try:
        path = Path(str(metadata.distribution("pipecat-ai").locate_file(MODEL_FILE)))
    except metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


class SmartTurnModel:
    """Process-wide: ONNX sessions (the 8 s window and, with `windows`, the model cut to
    narrower ones: turns/window.py) and a pool of `workers` threads (one onnxruntime thread
    each); a run waits for a worker only as long as `queue_ms` (see `submit`)."""

    TYPICAL_MS = 40.0  # an inference's time until some have been timed (~10-45 ms measured)

    def __init__(
        self,
        path: Path,
        *,
        workers: int = 2,
        queue_ms: float = 0.0,
        windows: bool = False,
        unsigned: bool | None = None,
        context_ms: int = CONTEXT * 10,
    ) -> None:
        """`queue_ms`: how long a run may be expected to wait for a worker; 0: never waits.
        `unsigned`: store the int8 weights unsigned (turns/int8.py; None: where this
        processor's int8 kernels saturate). `context_ms`: the padding kept ahead of the
        utterance on a cut window."""
        import onnxruntime

        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3

        def session(model: str | bytes) -> Any:
            return onnxruntime.InferenceSession(
                model, providers=["CPUExecutionProvider"], sess_options=opts
            )

        graph = for_this_cpu(path, unsigned)
        self.unsigned = graph is not None
        self.sessions = {N_FRAMES: session(graph.SerializeToString() if graph else str(path))}
        if windows:
            self.sessions.update({w: session(m) for w, m in cut_models(path, graph).items()})
        self.workers, self.queue_ms, self.context = workers, queue_ms, context_ms // 10
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="smart-turn")
        self._lock = threading.Lock()
        self.in_flight = 0
        self.inference_ms: list[float] = []  # recent, for /metrics and the benchmarks

    def probability(self, pcm16: bytes) -> float:
        """Blocking: P(the caller has finished) after the utterance's audio (PCM16, 16 kHz),
        on the narrowest window that holds it."""
        width = self.width(columns_of(pcm16))
        return self.score(window_features(pcm16, width))

    def width(self, columns: int | None) -> int:
        """The window a run on an utterance of `columns` uses (the 8 s one without cuts)."""
        width = N_FRAMES if columns is None else window_for(columns, self.context)
        return width if width in self.sessions else N_FRAMES

    def score(self, features: np.ndarray) -> float:
        """Blocking: the model on (80, width) features, `width` one of `sessions`."""
        x = np.ascontiguousarray(features[None], dtype=np.float32)
        out = self.sessions[features.shape[1]].run(None, {"input_features": x})
        return float(np.asarray(out[0]).reshape(-1)[0])

    def submit(self, pcm16: bytes) -> Future[float] | None:
        """Run `probability` on the pool; None when every worker is busy and the runs ahead
        of this one would keep it waiting longer than `queue_ms`."""
        with self._lock:
            if self.expected_wait_ms(self.in_flight) > self.queue_ms:
                return None
            self.in_flight += 1
        try:
            fut = self.pool.submit(self._timed, pcm16)
        except RuntimeError:  # the pool was shut down
            self._done()
            return None
        fut.add_done_callback(lambda _f: self._done())
        return fut

    def expected_wait_ms(self, in_flight: int) -> float:
        """How long a new run would wait for a worker with `in_flight` runs taken: the rounds
        of runs ahead of it (each worker takes one at a time) times a recent median run."""
        rounds = -(-(in_flight - self.workers + 1) // self.workers)
        if rounds <= 0:
            return 0.0
        return rounds * self.recent_ms()

    def recent_ms(self) -> float:
        """A recent median run (features and inference)."""
        recent = sorted(self.inference_ms[-20:])
        return recent[len(recent) // 2] if recent else self.TYPICAL_MS

    def _timed(self, pcm16: bytes) -> float:
        """`probability`, timed: the features and the inference."""
        start = time.perf_counter()
        p = self.probability(pcm16)
        self.inference_ms = [*self.inference_ms[-99:], (time.perf_counter() - start) * 1000]
        return p

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def warmup(self) -> None:
        for width in self.sessions:
            self.score(np.zeros((80, width), dtype=np.float32))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def load_model(config: TurnConfig) -> SmartTurnModel | None:
    """The process-wide model (`model_workers`, `queue_ms`, `model_window`,
    `model_context_ms`), or None (with one warning) when the file is missing."""
    path = find_model()
    if path is None:
        log.warning(
            "turn detection 'smart' needs the Smart Turn v3.2 model: install it with "
            "`pip install --no-deps %s`; using VAD-only turn detection",
            MODEL_PACKAGE,
        )
        return None
    model = SmartTurnModel(
        path,
        workers=config.model_workers,
        queue_ms=config.queue_ms,
        windows=config.model_window,
        context_ms=config.model_context_ms,
    )
    model.warmup()
    return model


class ModelSignal:
    """One call's use of the process-wide model: one run per pause on its pool, or None when
    the process is `busy` (the gateway: a whisper decode waits for a worker, so the model's CPU
    would slow the transcripts every turn waits for; the pause falls back, `busy`). `broken`
    after a failed run: the call uses the silence rule from then on."""

    def __init__(
        self,
        model: SmartTurnModel,
        busy: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model, self.busy, self.clock = model, busy, clock
        self.broken = False

    def submit(self, pcm16: bytes) -> Future[float] | None:
        """A model run on the pool, or None: the process or the model's pool is busy."""
        if self.busy is not None and self.busy():
            return None
        return self.model.submit(pcm16)

    def recent_ms(self) -> float:
        return self.model.recent_ms()

    def last_ms(self) -> float:
        """The last run's time (features and inference), 0 before any."""
        return self.model.inference_ms[-1] if self.model.inference_ms else 0.0
