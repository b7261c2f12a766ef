"""Int8 codes of an index's rows and a bounded int8 first pass over them (onnxruntime).

The exact float32 scan of 100k × 384 rows reads 154 MB per query. The int8 codes are a quarter
of that, and onnxruntime's integer matrix product reads them at memory speed. Each score it
gives comes with a proven error bound, so the caller keeps every row that could be in the
exact top k and re-scores only those in float32:

    q·v − q̃·ṽ = q·(v − ṽ) + (q − q̃)·ṽ,   |q·v − q̃·ṽ| ≤ ‖q‖·‖v − ṽ‖ + ‖q − q̃‖·‖ṽ‖

where ṽ = row scale × row codes and q̃ = query scale × query codes. ‖v − ṽ‖ and ‖ṽ‖ are kept
per row. A relative margin (1e-4·‖q‖·‖v‖) covers float32 rounding: of the exact score
(≤ 384·2⁻²⁴ ≈ 2.3e-5 relative, any summation order) and of the bound arithmetic itself. Rows
and queries whose largest component is outside [1e-15, 1e15] (not embeddings: float32 would
underflow or overflow) get an infinite bound, i.e. are always re-scored exactly.

Codes are stored row-major as uint8 (code + 127, in [0, 254]), in blocks of BLOCK rows (the
last block grows by doubling), and form the left operand of onnxruntime's MatMulInteger with the
query codes as a one-column int8 right operand: the uint8 × int8 kernel then streams the rows
without repacking them (the other way round, the (dim, rows) operand is packed on every call,
about 7× slower at 100k rows). The query codes are 7-bit ([-63, 63]) so that a pair of
uint8·int8 products stays inside int16: kernels without VNNI (vpmaddubsw saturates) give exact
integer dots too. `session()` checks exactness on extreme codes once; where it fails the caller
scans exactly instead. The row offset comes out as 127 × the query's code sum, one number per
query.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from memory import onnx_graph

BLOCK = 32768
ROW_LEVELS = 127
QUERY_LEVELS = 63
ROW_OFFSET = 127
MARGIN = 1e-4
SAFE_MIN, SAFE_MAX = 1e-15, 1e15
_state: dict[str, Any] = {}
_lock = threading.Lock()
log = logging.getLogger(__name__)


def session() -> Any:
    """The shared onnxruntime session (its run() is thread-safe), or None if its integer
    products are not exact on this CPU."""
    with _lock:
        if "session" not in _state:
            sess = onnx_graph.session(
                "MatMulInteger",
                [("codes", onnx_graph.UINT8, ["rows", "dim"]), ("q", onnx_graph.INT8, ["dim", 1])],
                ("y", onnx_graph.INT32, ["rows", 1]),
            )
            rng = np.random.default_rng(0)
            q = np.full((384, 1), QUERY_LEVELS, dtype=np.int8)
            q[1::3] = -QUERY_LEVELS
            codes = rng.choice([0, 2 * ROW_LEVELS], (64, 384)).astype(np.uint8)
            codes[0], codes[1] = 2 * ROW_LEVELS, 0
            exact = codes.astype(np.int64) @ q.astype(np.int64)
            if not np.array_equal(sess.run(None, {"codes": codes, "q": q})[0], exact):
                log.warning("onnxruntime's int8 products are not exact here: exact scans only")
                sess = None
            _state["session"] = sess
        return _state["session"]


class Int8Codes:
    """Per row: uint8 codes (code + 127, row-major blocks), scale, ‖v − ṽ‖ (+ margin), ‖ṽ‖."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._blocks: list[np.ndarray] = []
        self._n = 0
        self._scale = np.zeros(0, dtype=np.float32)
        self._err = np.zeros(0, dtype=np.float32)
        self._norm = np.zeros(0, dtype=np.float32)

    def append(self, vectors: np.ndarray) -> None:
        """Quantize finite float32 `vectors` into the next rows, a few thousand at a time
        (small temporaries: fresh memory for 100k-row ones costs more than the arithmetic)."""
        end = self._n + len(vectors)
        if end > len(self._scale):
            cap = max(end, 2 * len(self._scale))
            for name in ("_scale", "_err", "_norm"):
                old = getattr(self, name)
                setattr(self, name, np.concatenate([old, np.zeros(cap - len(old), old.dtype)]))
        done = 0
        while self._n < end:
            index, row = divmod(self._n, BLOCK)
            take = min(end - self._n, BLOCK - row, 4096)
            block = self._block(index, row + take)
            self._quantize(vectors[done : done + take], block[row : row + take])
            done += take
            self._n += take

    def _quantize(self, vectors: np.ndarray, out: np.ndarray) -> None:
        v = np.asarray(vectors, dtype=np.float32)
        amax = np.abs(v).max(axis=1)
        safe = (amax >= SAFE_MIN) & (amax <= SAFE_MAX)
        scale = np.where(safe, amax / ROW_LEVELS, 1).astype(np.float32)
        codes = np.where(safe[:, None], np.rint(v / scale[:, None]), 0)
        np.clip(codes, -ROW_LEVELS, ROW_LEVELS, out=codes)
        deq = codes * scale[:, None]
        norm = np.linalg.norm(deq, axis=1)
        err = np.where(safe, np.linalg.norm(v - deq, axis=1), np.inf)
        rows = slice(self._n, self._n + len(v))
        self._scale[rows] = scale
        self._err[rows] = err + MARGIN * (norm + err)
        self._norm[rows] = norm
        out[:] = codes + ROW_OFFSET

    def _block(self, index: int, height: int) -> np.ndarray:
        """Block `index`, at least `height` rows tall (the blocks before it are full)."""
        if index == len(self._blocks):
            self._blocks.append(np.zeros((0, self.dim), dtype=np.uint8))
        block = self._blocks[index]
        if height > len(block):
            taller = np.zeros((min(BLOCK, max(height, 64, 2 * len(block))), self.dim), np.uint8)
            taller[: len(block)] = block
            block = self._blocks[index] = taller
        return block

    def bounds(self, sess: Any, query: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(approximate score, half-width), float32 per row: each row's exact float32 score
        (in any summation order) lies within approx ± half-width. None for a query outside
        the safe range (the caller scores every row exactly)."""
        q = query.astype(np.float64)
        amax = float(np.abs(q).max())
        if not SAFE_MIN <= amax <= SAFE_MAX:
            return None
        q_scale = amax / QUERY_LEVELS
        q_codes = np.clip(np.rint(q / q_scale), -QUERY_LEVELS, QUERY_LEVELS)
        q_err = float(np.linalg.norm(q - q_codes * q_scale)) * (1 + MARGIN)
        q_i8 = q_codes.astype(np.int8)[:, None]
        n = self._n
        parts = [
            sess.run(None, {"codes": b[: n - i * BLOCK], "q": q_i8})[0][:, 0]
            for i, b in enumerate(self._blocks)
        ]
        dots = np.concatenate(parts) if len(parts) > 1 else parts[0]
        dots -= ROW_OFFSET * int(q_codes.sum())
        approx = dots.astype(np.float32)
        approx *= self._scale[:n]
        approx *= np.float32(q_scale)
        half = self._err[:n] * np.float32(np.linalg.norm(q))
        half += self._norm[:n] * np.float32(q_err)
        return approx, half
