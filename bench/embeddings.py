"""Local MiniLM-L6 embedding throughput (numpy + onnxruntime + tokenizers + safetensors, no torch).

Measures the model load, sentences per second embedded in batches (how archival inserts run)
and one at a time (how a search query runs), with per-call latency percentiles. The ratio of
batched to single throughput is the gain from batching, measured in the same run.
"""

from __future__ import annotations

import asyncio
import time

from _common import Timer, emit, parser, ratio, summary

from memory.embeddings import LocalMiniLM

SENTENCES = [
    "The user mentioned that they prefer green tea in the morning.",
    "We talked about a hiking trip to the mountains next summer.",
    "Their sister Maria is visiting from Lisbon in two weeks.",
    "They asked me to remind them about the dentist appointment on Friday.",
    "The cat knocked a glass of water onto the new laptop keyboard.",
    "A short note.",
    "They are learning Spanish with an app and practise every evening after dinner, "
    "usually for about twenty minutes, and would like to reach B1 level by next year.",
    "Football on Saturday: the local team lost two to one.",
]


async def main() -> None:
    args = parser(__doc__ or "").parse_args()
    n = 256 if args.quick else 2048
    texts = [f"{SENTENCES[i % len(SENTENCES)]} ({i})" for i in range(n)]
    model = LocalMiniLM()
    with Timer() as load:
        model.embed_sync(["warm up"])
    batch_calls: list[float] = []
    t0 = time.perf_counter()
    for start in range(0, n, 32):
        with Timer() as t:
            await model.embed(texts[start : start + 32])
        batch_calls.append(t.ms)
    batched_s = time.perf_counter() - t0
    singles = texts[: n // 4]
    single_calls: list[float] = []
    t0 = time.perf_counter()
    for text in singles:
        with Timer() as t:
            await model.embed([text])
        single_calls.append(t.ms)
    single_s = time.perf_counter() - t0
    batched_rate = n / batched_s
    single_rate = len(singles) / single_s
    emit(
        "embeddings",
        {
            "quick": args.quick,
            "model": "all-MiniLM-L6-v2 (local, numpy + onnxruntime dense layers)",
            "dim": model.dim,
            "load_ms": round(load.ms, 1),
            "batched_32": {
                "sentences": n,
                "sentences_per_s": round(batched_rate, 1),
                "per_call": summary(batch_calls),
            },
            "single": {
                "sentences": len(singles),
                "sentences_per_s": round(single_rate, 1),
                "per_call": summary(single_calls),
            },
            "throughput_ratio_batched_vs_single": ratio(batched_rate, single_rate),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
