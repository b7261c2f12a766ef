"""Silero VAD v6 from the ONNX file inside faster-whisper, run with onnxruntime (no torch).

The model takes 512-sample windows (32 ms) with 64 samples of context and LSTM state; 20 ms
frames are buffered and the newest window's probability answers for the frame."""

from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from voice_gateway.vad.base import VAD

WINDOW, CONTEXT = 512, 64


@lru_cache(maxsize=1)
def _session():
    import faster_whisper
    import onnxruntime

    path = os.path.join(os.path.dirname(faster_whisper.__file__), "assets", "silero_vad_v6.onnx")
    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=opts)


class SileroVAD(VAD):
    name = "silero"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold
        self.session = _session()
        self.reset()

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self.last_prob = 0.0

    def probability(self, frame: bytes) -> float:
        samples = np.frombuffer(frame, dtype="<i2").astype(np.float32) / 32768.0
        self._pending = np.concatenate([self._pending, samples])
        while len(self._pending) >= WINDOW:
            window, self._pending = self._pending[:WINDOW], self._pending[WINDOW:]
            x = np.concatenate([self._context, window])[None, :]
            out, self._h, self._c = self.session.run(None, {"input": x, "h": self._h, "c": self._c})
            self._context = window[-CONTEXT:]
            self.last_prob = float(np.asarray(out).reshape(-1)[0])
        return self.last_prob

    def is_speech(self, frame: bytes) -> bool:
        return self.probability(frame) >= self.threshold
