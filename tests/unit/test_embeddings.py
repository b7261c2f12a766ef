"""The local MiniLM-L6 embedder (numpy forward pass over the packaged weights)."""

from __future__ import annotations

import math

import numpy as np

from memory.embeddings import LocalMiniLM, gelu, get_embedder
from memory.vector_index import VectorIndex


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
