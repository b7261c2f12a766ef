"""The local MiniLM-L6 embedder (numpy forward pass over the packaged weights)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memory.embeddings import LocalMiniLM, get_embedder
from memory.minilm import gelu
from memory.vector_index import VectorIndex
from tests.support.minilm_reference import ReferenceMiniLM

SENTENCES = [
    "Hi",
    "",
    "The cat sleeps on the sofa.",
    "what does the user drink in the morning (12)",
    "Their sister Maria is visiting from Lisbon in two weeks.",
    "Ünïcödé, emoji 🎉 and 日本語 text; punctuation!!! ... ???",
    "numbers 3.14159 2,718 1e-9 and a URL https://example.com/a?b=c",
    "They are learning Spanish with an app and practise every evening after dinner, "
    "usually for about twenty minutes, and would like to reach B1 level by next year.",
    "A much longer sentence about taxes and forms and deadlines, " * 30,  # > 256 tokens
    *(f"The user talked about topic {i} on day {i * 7} (mood {i % 9})." for i in range(40)),
]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    ref = ReferenceMiniLM()
    return np.vstack([ref.embed(t) for t in SENTENCES])


def test_gelu_matches_exact_erf_form() -> None:
    x = np.linspace(-8, 8, 20001, dtype=np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    out = gelu(x.copy())
    assert out.dtype == np.float32
    assert np.abs(out - exact).max() < 1e-6


def test_embeddings_are_normalised_deterministic_and_batch_independent() -> None:
    model = get_embedder("local/all-minilm-l6-v2")
    assert isinstance(model, LocalMiniLM)
    texts = ["The cat sleeps on the sofa.", "A much longer sentence about taxes, " * 5, "Hi"]
    batch = model.embed_sync(texts)
    assert batch.shape == (3, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    singles = np.vstack([model.embed_sync([t]) for t in texts])
    # padding in a batch must not change a sentence's vector
    assert np.abs(batch - singles).max() < 1e-5


def test_semantic_similarity_ranks_paraphrases_first() -> None:
    model = get_embedder("local/all-minilm-l6-v2")
    query = "Where does the user live?"
    docs = [
        "The stock market fell sharply this morning.",
        "The user lives in Lisbon, near the river.",
        "Green tea should steep for three minutes.",
        "My favourite football team lost on Saturday.",
    ]
    vecs = model.embed_sync([query, *docs])
    scores = vecs[1:] @ vecs[0]
    assert int(np.argmax(scores)) == 1
    assert scores[1] - np.delete(scores, 1).max() > 0.15
    # the same ranking through the archival index
    index = VectorIndex(384)
    index.add([f"p{i}" for i in range(4)], vecs[1:], [0.0] * 4, [[]] * 4)
    assert index.search(vecs[0], 1)[0].passage_id == "p1"


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_matches_the_plain_reference_forward_pass(reference: np.ndarray) -> None:
    """The re-laid-out encoder (fused QKV, in-place GELU/LayerNorm, no mask when unpadded)
    computes the same function as the plain one, one sentence at a time and in padded
    batches of mixed lengths (and in equal-length batches, which take the unmasked path)."""
    model = LocalMiniLM()
    singles = np.vstack([model.embed_sync([t]) for t in SENTENCES])
    batched = model.embed_sync(SENTENCES)
    small_batches = LocalMiniLM(batch_size=3).embed_sync(SENTENCES[::-1])[::-1]
    for out in (singles, batched, small_batches):
        assert out.dtype == np.float32
        assert cosines(out, reference).min() > 0.99999
        assert np.abs(out - reference).max() < 1e-5
    same_length = [f"The user talked about topic {i} today." for i in range(10, 20)]
    assert len({len(e.ids) for e in model.tok.encode_batch(same_length)}) == 1
    ref = ReferenceMiniLM()
    want = np.vstack([ref.embed(t) for t in same_length])
    assert np.abs(model.embed_sync(same_length) - want).max() < 1e-5


def test_bad_inputs() -> None:
    model = get_embedder("local/all-minilm-l6-v2")
    assert model.embed_sync([]).shape == (0, 384)
    with pytest.raises(TypeError):
        model.embed_sync([None])  # type: ignore[list-item]
