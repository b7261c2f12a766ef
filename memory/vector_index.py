"""A per-agent in-memory cosine index with vectorised tag and time filters.

Search is exact: the result is the brute-force float32 scan's, ranked by score, ties by
insertion order. A row's score is its float32 dot product with the query computed by einsum,
whose per-row result does not depend on which other rows are scored with it (BLAS gemv's does,
in the last bit, which could reorder near-ties between a full and a filtered scan). Up to
`exact_below` candidate rows that is the scan. Above, an int8 first pass over all rows gives
each an approximate score with a proven error bound (memory/int8_scan.py); the k-th largest
lower bound is a floor for the k-th best exact score, so only the candidates whose upper bound
reaches it are scored exactly (a few hundred of 100k on real embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memory import int8_scan


@dataclass(slots=True)
class IndexHit:
    passage_id: str
    score: float


class VectorIndex:
    """Rows are L2-normalised float32 vectors; capacity doubles so appends are amortised O(1)."""

    def __init__(self, dim: int, capacity: int = 64, exact_below: int = 4096) -> None:
        self.dim = dim
        self.exact_below = exact_below
        self._codes = int8_scan.Int8Codes(dim)
        self._vecs = np.zeros((capacity, dim), dtype=np.float32)
        self._times = np.zeros(capacity, dtype=np.float64)
        self._alive = np.zeros(capacity, dtype=bool)
        self._tag_masks: dict[str, np.ndarray] = {}
        self._owner_masks: dict[str, np.ndarray] = {}  # caller -> their rows
        self._owned = np.zeros(capacity, dtype=bool)  # rows that belong to some caller
        self._ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._n = 0
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def _grow(self, need: int) -> None:
        cap = len(self._vecs)
        if need <= cap:
            return
        new = max(need, cap * 2)
        self._vecs = np.resize(self._vecs, (new, self.dim))
        self._vecs[cap:] = 0
        for name in ("_times", "_alive"):
            arr = getattr(self, name)
            grown = np.zeros(new, dtype=arr.dtype)
            grown[:cap] = arr
            setattr(self, name, grown)
        for masks in (self._tag_masks, self._owner_masks):
            for key, mask in masks.items():
                grown = np.zeros(new, dtype=bool)
                grown[:cap] = mask
                masks[key] = grown
        owned = np.zeros(new, dtype=bool)
        owned[:cap] = self._owned
        self._owned = owned

    def add(
        self,
        ids: list[str],
        vectors: np.ndarray,
        created_at: list[float],
        tags: list[list[str]],
        owners: list[str | None] | None = None,
    ) -> None:
        """`owners`: per row, the caller it belongs to (None: everyone's, agent-wide)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors must have shape (n, {self.dim}), got {vectors.shape}")
        if not (len(ids) == len(vectors) == len(created_at) == len(tags)):
            raise ValueError("ids, vectors, created_at and tags must have the same length")
        if not np.isfinite(vectors).all():
            raise ValueError("vectors must be finite (no NaN or infinity)")
        start = self._n
        self._grow(start + len(ids))
        end = start + len(ids)
        self._vecs[start:end] = vectors
        self._codes.append(self._vecs[start:end])
        self._times[start:end] = created_at
        self._alive[start:end] = True
        for offset, (pid, row_tags) in enumerate(zip(ids, tags, strict=True)):
            row = start + offset
            if pid in self._pos:
                self._alive[self._pos[pid]] = False
                self._live -= 1
            self._pos[pid] = row
            self._ids.append(pid)
            for tag in row_tags:
                mask = self._tag_masks.get(tag)
                if mask is None:
                    mask = self._tag_masks[tag] = np.zeros(len(self._vecs), dtype=bool)
                mask[row] = True
            owner = owners[offset] if owners is not None else None
            if owner is not None:  # a caller's own row: hidden from everyone else
                mask = self._owner_masks.get(owner)
                if mask is None:
                    mask = self._owner_masks[owner] = np.zeros(len(self._vecs), dtype=bool)
                mask[row] = True
                self._owned[row] = True
        self._n = end
        self._live += len(ids)

    def remove(self, ids: list[str]) -> None:
        for pid in ids:
            row = self._pos.pop(pid, None)
            if row is not None and self._alive[row]:
                self._alive[row] = False
                self._live -= 1

    def search(
        self,
        query: np.ndarray,
        top_k: int,
        *,
        tags: list[str] | None = None,
        match_all_tags: bool = False,
        start: float | None = None,
        end: float | None = None,
        owner: str | None = None,
    ) -> list[IndexHit]:
        """Rows visible to caller `owner`: everyone's rows and that caller's own (None: only
        everyone's)."""
        n = self._n
        if n == 0 or top_k <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape != (self.dim,) or not np.isfinite(q).all():
            raise ValueError(f"the query must be {self.dim} finite numbers")
        keep = self._alive[:n] & ~self._owned[:n]
        if owner is not None and (mine := self._owner_masks.get(owner)) is not None:
            keep |= self._alive[:n] & mine[:n]
        if tags:
            masks = [
                self._tag_masks.get(t, np.zeros(len(self._vecs), dtype=bool))[:n] for t in tags
            ]
            combined = (
                np.logical_and.reduce(masks) if match_all_tags else np.logical_or.reduce(masks)
            )
            keep &= combined
        if start is not None:
            keep &= self._times[:n] >= start
        if end is not None:
            keep &= self._times[:n] <= end
        candidates = np.flatnonzero(keep)
        if candidates.size == 0:
            return []
        k = min(top_k, candidates.size)
        sess = int8_scan.session() if candidates.size > self.exact_below else None
        bounds = self._codes.bounds(sess, q) if sess is not None else None
        if bounds is not None:
            approx, half = bounds
            if candidates.size < n:
                approx, half = approx[candidates], half[candidates]
            floor = np.partition(approx - half, -k)[-k]
            approx += half
            candidates = candidates[approx >= floor]
        if n <= self.exact_below:
            scores = np.einsum("ij,j->i", self._vecs[:n], q)[candidates]
        else:
            scores = np.einsum("ij,j->i", self._vecs[candidates], q)
        kth = np.partition(scores, -k)[-k]
        best = np.flatnonzero(scores >= kth)  # ties at the k-th score included
        best = best[np.argsort(-scores[best], kind="stable")][:k]  # candidates are ascending
        return [IndexHit(self._ids[candidates[i]], float(scores[i])) for i in best]
