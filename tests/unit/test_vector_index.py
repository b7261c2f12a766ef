"""VectorIndex search is exactly the brute-force float32 scan, on both of its paths: the plain
scan (few candidates) and the int8 first pass with a float32 re-score (memory/int8_scan.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memory import int8_scan
from memory.embeddings import get_embedder
from memory.vector_index import VectorIndex

DIM = 384


class Rows:
    """The index's content kept beside it, for the brute-force reference."""

    def __init__(self, dim: int = DIM, **kwargs: int) -> None:
        self.index = VectorIndex(dim, **kwargs)
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.vecs = np.zeros((0, dim), dtype=np.float32)
        self.times: list[float] = []
        self.tags: list[list[str]] = []
        self.alive: list[bool] = []

    def add(self, vecs: np.ndarray, times: list[float], tags: list[list[str]], ids: list[str]):
        self.index.add(ids, vecs, times, tags)
        for pid in ids:
            if pid in self.pos:  # a replacement
                self.alive[self.pos[pid]] = False
            self.pos[pid] = len(self.ids)
            self.ids.append(pid)
            self.alive.append(True)
        self.vecs = np.vstack([self.vecs, vecs.astype(np.float32)])
        self.times += times
        self.tags += tags

    def remove(self, ids: list[str]) -> None:
        self.index.remove(ids)
        for pid in ids:
            if pid in self.pos:
                self.alive[self.pos.pop(pid)] = False

    def check(self, q: np.ndarray, k: int, **filters: object) -> list[str]:
        """Assert the index's answer is the brute force's (ids, order, scores); return it."""
        got = self.index.search(q, k, **filters)  # type: ignore[arg-type]
        want = self.brute(q.astype(np.float32), k, **filters)  # type: ignore[arg-type]
        assert [h.passage_id for h in got] == [self.ids[r] for r in want]
        scores = np.array([h.score for h in got])
        v, q32 = self.vecs[want], q.astype(np.float32)
        assert np.array_equal(scores, np.einsum("ij,j->i", v, q32).astype(np.float64))
        # ... which is the float32 dot product, within its rounding (BLAS's, float64's)
        tol = 2 * len(q) * 2.0**-24 * (np.abs(v) @ np.abs(q32)) + 1e-30
        assert np.all(np.abs(scores - v @ q32) <= tol)
        assert np.all(np.abs(scores - v.astype(np.float64) @ q32.astype(np.float64)) <= tol)
        return [h.passage_id for h in got]

    def brute(
        self,
        q: np.ndarray,
        k: int,
        tags: list[str] | None = None,
        match_all_tags: bool = False,
        start: float | None = None,
        end: float | None = None,
    ) -> list[int]:
        keep = np.array(self.alive, dtype=bool)
        times = np.array(self.times)
        if start is not None:
            keep &= times >= start
        if end is not None:
            keep &= times <= end
        if tags:
            has = [np.array([t in row for row in self.tags], dtype=bool) for t in tags]
            keep &= np.logical_and.reduce(has) if match_all_tags else np.logical_or.reduce(has)
        rows = np.flatnonzero(keep)
        scores = np.einsum("ij,j->i", self.vecs, q)[rows]
        return [int(r) for r in rows[np.lexsort((rows, -scores))][: max(k, 0)]]


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fill(rows: Rows, vecs: np.ndarray, chunks: list[int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    at = 0
    for size in chunks:
        part = vecs[at : at + size]
        names = [f"p{at + i}" for i in range(len(part))]
        tags = [[t for t in ("a", "b") if rng.random() < 0.3] for _ in names]
        rows.add(part, [float(at + i) for i in range(len(part))], tags, names)
        at += size


FILTERS: list[dict[str, object]] = [
    {},
    {"tags": ["a"]},
    {"tags": ["a", "b"]},
    {"tags": ["a", "b"], "match_all_tags": True},
    {"tags": ["nope"]},
    {"start": 1000.0},
    {"end": 2500.0},
    {"start": 500.0, "end": 520.0, "tags": ["b"]},
]


def test_int8_products_are_exact_on_this_cpu() -> None:
    sess = int8_scan.session()
    assert sess is not None
    rng = np.random.default_rng(3)
    q = rng.integers(-63, 64, (DIM, 1)).astype(np.int8)
    codes = rng.integers(0, 255, (999, DIM)).astype(np.uint8)
    got = sess.run(None, {"codes": codes, "q": q})[0]
    assert np.array_equal(got, codes.astype(np.int64) @ q.astype(np.int64))


@pytest.mark.parametrize(
    ("n", "chunks"),
    [(3000, [3000]), (4097, [1, 63, 4033]), (40_000, [20_000, 12_768, 1, 7231])],
)
def test_random_vectors_match_brute_force_with_filters(n: int, chunks: list[int]) -> None:
    rng = np.random.default_rng(n)
    rows = Rows()
    fill(rows, unit(rng, n), chunks)
    passes = []
    first_pass = rows.index._codes.bounds
    rows.index._codes.bounds = lambda *a: passes.append(1) or first_pass(*a)  # type: ignore
    for q in unit(rng, 4):
        for k in (1, 5, 50):
            for filters in FILTERS:
                rows.check(q, k, **filters)
    # above 4096 candidates (unfiltered; at 40k also tag a, a or b, start) the int8 pass runs
    assert len(passes) == {3000: 0, 4097: 12, 40_000: 48}[n]


def test_deletes_replacements_growth_and_ties() -> None:
    rng = np.random.default_rng(5)
    rows = Rows()
    base = unit(rng, 6000)
    q = base[1234]  # 12 exact copies of row 1234 added between two halves: a tie of 13 at 1.0
    names = [f"p{i}" for i in range(6000)]
    rows.add(base[:3000], [float(i) for i in range(3000)], [["a"]] * 3000, names[:3000])
    twins = [f"twin{i}" for i in range(12)]
    rows.add(np.repeat(q[None], 12, 0), [5.0] * 12, [["b"]] * 12, twins)
    rows.add(base[3000:], [float(i) for i in range(3000, 6000)], [[]] * 3000, names[3000:])
    assert rows.check(q, 5) == ["p1234", *twins[:4]]
    assert rows.check(q, 3, tags=["b"]) == twins[:3]
    rows.remove(["p1234", "twin1", "p17", "missing"])
    assert rows.check(q, 3) == ["twin0", "twin2", "twin3"]
    rows.add(-q[None], [1.0], [["a"]], ["twin0"])  # re-adding an id replaces its row
    assert rows.check(q, 3) == ["twin2", "twin3", "twin4"]
    for filters in FILTERS:
        rows.check(q, 10, **filters)
        rows.check(-q, 10, **filters)
    assert len(rows.index) == sum(rows.alive) == 6009


def test_real_minilm_vectors_match_brute_force() -> None:
    model = get_embedder("local/all-minilm-l6-v2")
    rng = np.random.default_rng(11)
    topics = ["tea", "the dentist", "a trip to Lisbon", "the cat", "taxes", "a concert"]
    texts = [
        f"The user talked about {topics[i % 6]} on day {i} (mood {rng.integers(1, 9)})."
        for i in range(120)
    ]
    base = model.embed_sync(texts)
    pick = rng.integers(0, len(base), 9000)
    vecs = base[pick] + rng.normal(0, 0.01, (9000, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[::97] = base[pick[::97]]  # exact duplicates of the embedded sentences: ties
    rows = Rows()
    fill(rows, vecs, [5000, 4000])
    queries = model.embed_sync(["what does the user drink", "the cat", texts[3], "taxes day 7"])
    for q in queries:
        for filters in FILTERS:
            rows.check(q, 5, **filters)


finite = st.floats(-1e3, 1e3, width=32, allow_subnormal=True)


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(1, 60), st.just(8)), elements=finite),
    hnp.arrays(np.float32, (8,), elements=finite),
    st.integers(1, 8),
    st.data(),
)
def test_int8_path_is_exact_on_arbitrary_vectors(
    vecs: np.ndarray, q: np.ndarray, k: int, data: st.DataObject
) -> None:
    """exact_below=0 sends every search through the int8 pass: duplicates, zeros, tiny and
    large rows, unnormalised vectors."""
    rows = Rows(dim=8, exact_below=0)
    dup = data.draw(st.lists(st.integers(0, len(vecs) - 1), max_size=5))
    vecs = np.vstack([vecs, vecs[dup]])
    rows.add(vecs, [0.0] * len(vecs), [[]] * len(vecs), [f"r{i}" for i in range(len(vecs))])
    rows.check(q, k)
    rows.check(vecs[0], k)


def test_bounds_hold_for_every_row() -> None:
    rng = np.random.default_rng(2)
    vecs = np.vstack([unit(rng, 5000), np.eye(DIM, dtype=np.float32)[:50], np.zeros((3, DIM))])
    vecs[:100] *= np.float32(1e-12)
    codes = int8_scan.Int8Codes(DIM)
    codes.append(vecs[:37])
    codes.append(vecs[37:])
    sess = int8_scan.session()
    for q in [*unit(rng, 5), vecs[0], vecs[5001]]:
        bounds = codes.bounds(sess, q)
        assert bounds is not None
        approx, half = bounds
        exact = vecs.astype(np.float64) @ q.astype(np.float64)
        assert np.all(np.abs(exact - approx) <= half)
        assert np.median(half[100:5000]) < 0.05  # tight enough to prune real searches
    assert codes.bounds(sess, np.zeros(DIM, dtype=np.float32)) is None


def test_bad_inputs_are_clear_errors() -> None:
    index = VectorIndex(4)
    good = np.eye(4, dtype=np.float32)
    index.add(list("abcd"), good, [0.0] * 4, [[]] * 4)
    bad = good.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        index.add(list("efgh"), bad, [0.0] * 4, [[]] * 4)
    with pytest.raises(ValueError, match="shape"):
        index.add(["e"], np.ones((1, 5), dtype=np.float32), [0.0], [[]])
    with pytest.raises(ValueError, match="same length"):
        index.add(["e", "f"], good[:1], [0.0], [[]])
    assert len(index) == 4
    for q in (np.ones(5), np.array([1.0, np.nan, 0, 0]), np.array([np.inf, 0, 0, 0])):
        with pytest.raises(ValueError, match="4 finite numbers"):
            index.search(q, 1)
    assert index.search(good[2], 0) == []
    assert [h.passage_id for h in index.search(good[2], 1)] == ["c"]
    # a zero query: every score ties at 0, so insertion order decides
    assert [h.passage_id for h in index.search(np.zeros(4), 2)] == ["a", "b"]
