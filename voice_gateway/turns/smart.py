"""Smart Turn v3.2 (BSD-2-Clause, int8 ONNX, 8.7 MB) on onnxruntime, with the speculative
transcript and the voice's final fade (turns/fade.py) as second and third signals.

The model file ships inside the `pipecat-ai` 1.14.0 wheel, installed with `--no-deps`; nothing
of pipecat is imported. Measured (one thread): features ~1-6.5 ms for the columns that reach
a 1-4 s utterance (turns/features.py, a Zen 3) instead of ~24 ms for the 8 s window,
inference ~30-40 ms on the 8 s window and 16-33 ms on a window cut to the utterance
(turns/window.py), no gain from batching. So the model runs at most once per pause, on a
small process-wide pool, features and all: the event loop only keeps the call's audio. A pause
that finds every worker busy waits for one only while the runs ahead of it should be done
within `queue_ms` (half the verdict's budget, `VG_TURN_BUDGET_MS`), judged by the recent
inference times; otherwise it is decided by the silence rule (counted as `fallback:busy`).
Before, any pause that found the pool full fell back: at 24-48 calls of real speech 3-10 % of
turns did, each ending ~200 ms later than the model would have (docs/benchmarks.md,
`turn_capacity`, "Stop 30")."""

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

from voice_gateway.turns.decision import SmartDecision, combine
from voice_gateway.turns.fade import drop_db, faded
from voice_gateway.turns.features import N_FRAMES, RecentPcm, columns_of, window_features
from voice_gateway.turns.int8 import for_this_cpu
from voice_gateway.turns.policy import Decision, EndOfTurn, Ready, Verdict
from voice_gateway.turns.transcript import text_complete
from voice_gateway.turns.window import cut_models, window_for

__all__ = ["SmartTurn", "SmartTurnModel", "combine", "find_model", "load_model"]

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
    ) -> None:
        """`queue_ms`: how long a run may be expected to wait for a worker; 0: never waits.
        `unsigned`: store the int8 weights unsigned (turns/int8.py; None: where this
        processor's int8 kernels saturate)."""
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
        self.workers, self.queue_ms = workers, queue_ms
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
        width = N_FRAMES if columns is None else window_for(columns)
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


class SmartTurn(EndOfTurn):
    """Per call: the utterance's audio kept as it arrives, one model run per pause (the rule:
    turns/decision.py). `use_text`: combine with the speculative transcript;
    `text_wait_ms`: how long a 'complete' from the voice waits for the transcript's veto;
    `fade_db`: a 'complete' also needs the voice to have faded this far at its last sound
    (None: not asked); `sentence_ms`: a finished sentence in the transcript ends the turn
    after this much silence whatever the voice says (0: not used); `text_first`: with the
    voice faded, a transcript already there that says either way decides without the model
    (decision.py step 0); `defer_model`: and one still being decoded is waited for, up to
    `text_wait_ms`, before the model is asked; `deadline_ms`: the pause length (the silence
    rule's, `VG_ENDPOINT_SILENCE_MS`, in the gateway) past which no model run is waited for or
    started (`fallback:late`, decision.py), so a busy gateway never keeps a caller waiting
    longer than `vad` would, or than the transcript the reply needs, without a reason to
    (None: only `budget_ms` and `text_wait_ms`);
    `busy`: True when the process's cores are all taken (the gateway: a whisper decode waits
    for a worker): the model is then not run and the pause falls back to the silence rule
    (`fallback:busy`), so its CPU does not slow the transcripts every turn waits for.
    `unsure_ms` (EndOfTurn): a "not done" from the voice alone ends at this silence (`auto`)."""

    name = "smart"

    def __init__(
        self,
        model: SmartTurnModel,
        *,
        min_silence_ms: int = 200,
        max_silence_ms: int = 1600,
        threshold: float = 0.5,
        budget_ms: float = 300.0,
        use_text: bool = True,
        text_wait_ms: float = 400.0,
        fade_db: float | None = None,
        sentence_ms: int = 0,
        text_first: bool = True,
        defer_model: bool = True,
        deadline_ms: float | None = None,
        unsure_ms: float | None = None,
        busy: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        name: str = "smart",
    ) -> None:
        self.model, self.clock, self.name, self.unsure_ms = model, clock, name, unsure_ms
        self.min_silence_ms, self.max_silence_ms = min_silence_ms, max_silence_ms
        self.threshold, self.budget_ms = threshold, budget_ms
        self.use_text, self.text_wait_ms = use_text, text_wait_ms
        self.fade_db, self.sentence_ms, self.text_first = fade_db, sentence_ms, text_first
        self.defer_model = defer_model and text_first and use_text
        if deadline_ms is not None and deadline_ms <= min_silence_ms:
            deadline_ms = None  # it would leave the model no time at all
        self.deadline_ms, self.busy = deadline_ms, busy
        self.audio = RecentPcm()  # the utterance's last 8 s, as it arrives
        self.broken = False  # a failed inference: this call uses the silence rule

    def left_ms(self, waited_ms: float) -> float:
        """How long a decision `waited_ms` into the pause may still take (inf: no deadline)."""
        if self.deadline_ms is None:
            return float("inf")
        return self.deadline_ms - self.min_silence_ms - waited_ms

    def submit(self, pcm16: bytes) -> Future[float] | None:
        """A model run on the pool, or None: the process or the model's pool is busy."""
        if self.busy is not None and self.busy():
            return None
        return self.model.submit(pcm16)

    def start(self, preroll: list[bytes]) -> None:
        self.audio.reset()
        for frame in preroll:
            self.feed(frame)

    def feed(self, frame: bytes) -> None:
        self.audio.append(frame)

    def decide(self, text: str | None = None) -> Decision:
        if self.broken:
            return Ready(Verdict(None, "fallback", reason="error"))
        started = time.perf_counter()
        try:
            pcm = self.audio.pcm()
            fade = None if self.fade_db is None else faded(drop_db(pcm), self.fade_db)
            if fade is False:
                # the voice stopped at full level: the model's "done" would be vetoed (decision.py
                # step 2), so it is not asked. bench/turn_taking.py's corpus: 60 % of pauses, 95 %
                # of those inside a sentence, and every espeak-ng sentence (turn_scores.json)
                return SmartDecision(self, None, 0.0, fade)
            signal = text_complete(text) if text is not None and self.use_text else None
            if fade and self.text_first and signal is not None:
                # a faded voice and a transcript already decoded that says either way: the
                # words decide, the model is not asked (decision.py step 0)
                return Ready(Verdict(signal, "text", None, text))
            if fade and self.defer_model and text is None:
                # the transcript may still come and decide alone: the model is asked only if
                # it does not (decision.py step 0), so a busy gateway whose decodes come late
                # does not pay for both
                return SmartDecision(self, None, (time.perf_counter() - started) * 1000, fade, pcm)
            future = self.submit(pcm)  # the features are computed on the pool
        except Exception as exc:
            log.warning("end-of-turn features failed: %s", exc)
            self.broken = True
            return Ready(Verdict(None, "fallback", reason="error"))
        features_ms = (time.perf_counter() - started) * 1000
        if future is None:  # the words on their way may still decide (decision.py)
            return SmartDecision(self, None, features_ms, fade, dropped="busy")
        return SmartDecision(self, future, features_ms, fade)


def load_model(workers: int, queue_ms: float = 0.0, windows: bool = True) -> SmartTurnModel | None:
    """The process-wide model, or None (with one warning) when the file is missing."""
    path = find_model()
    if path is None:
        log.warning(
            "turn detection 'smart' needs the Smart Turn v3.2 model: install it with "
            "`pip install --no-deps %s`; using VAD-only turn detection",
            MODEL_PACKAGE,
        )
        return None
    model = SmartTurnModel(path, workers=workers, queue_ms=queue_ms, windows=windows)
    model.warmup()
    return model
