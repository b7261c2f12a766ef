"""Archives and files: file ingestion rate and `POST /v1/passages/search` latency.

1. Ingestion: a generated 50-page PDF and a Markdown FAQ uploaded to a folder of a live
   gateway (real HTTP on loopback, real SQLite, the local MiniLM), timed from the upload to
   `processing_status` "completed": pages/s (PDF) and chunks/s embedded.
2. Search: 100,000 passages across 10 shared archives attached to one agent (vectors: real
   MiniLM embeddings of distinct sentences, jittered and re-normalised, stored through the ORM
   as bench/archival_search.py does), `POST /v1/passages/search {agent_id, query}` over HTTP:
   the version check of the 11 archives (one query), the query embedding, 11 index scans (int8
   first pass, exact re-score) merged to the top 10. Cold first search reported apart.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from _common import Timer, emit, parser, summary
from archival_search import QUERIES, sentences

from memory.embeddings import LOCAL_HANDLE, get_embedder
from memory.ids import new_id
from memory.orm import Passage
from memory.service import Memory
from tests.support.gateway import running_gateway
from tests.support.pdf import write_pdf

ARCHIVES, PER_ARCHIVE = 10, 10_000


def manual(pages: int) -> bytes:
    return write_pdf(
        [
            [f"Chapter {n}: operating notes for unit {n}."]
            + [f"Unit {n} check {k}: inspect valve {k} and record the pressure." for k in range(25)]
            for n in range(1, pages + 1)
        ]
    )


def ingest(url: str, quick: bool) -> dict[str, object]:
    pages = 10 if quick else 50
    faq = "\n\n".join(f"## Question {i}?\nAnswer {i}: see the desk." for i in range(200))
    with httpx.Client(base_url=url, timeout=300) as c:
        folder = c.post("/v1/folders/", json={"name": "bench"}).json()
        out: dict[str, object] = {}
        for name, data, kind in (
            ("manual.pdf", manual(pages), "application/pdf"),
            ("faq.md", faq.encode(), "text/markdown"),
        ):
            t0 = time.perf_counter()
            f = c.post(f"/v1/folders/{folder['id']}/upload", files={"file": (name, data, kind)})
            f.raise_for_status()
            fid = f.json()["id"]
            while True:
                info = c.get(f"/v1/folders/{folder['id']}/files/{fid}").json()
                if info["processing_status"] in ("completed", "error"):
                    break
                time.sleep(0.05)
            took = time.perf_counter() - t0
            assert info["processing_status"] == "completed", info
            out[name] = {
                "bytes": len(data),
                "seconds": round(took, 2),
                "chunks": info["total_chunks"],
                "chunks_per_s": round(info["total_chunks"] / took, 1),
                **(
                    {"pages": pages, "pages_per_s": round(pages / took, 1)}
                    if kind.endswith("pdf")
                    else {}
                ),
            }
        return out


async def fill(db_url: str, quick: bool) -> str:
    memory = await Memory.open(db_url)
    per = PER_ARCHIVE // 10 if quick else PER_ARCHIVE
    try:
        texts = sentences(400 if quick else 3000)
        base = await get_embedder(LOCAL_HANDLE).embed(texts)
        agent = await memory.agents.create(
            user_id=None,
            name="kb",
            system="",
            model="scripted/demo",
            embedding=LOCAL_HANDLE,
            blocks=[],
        )
        rng = np.random.default_rng(1)
        for a in range(ARCHIVES):
            archive = await memory.archives.create(None, f"kb-{a}", LOCAL_HANDLE)
            for start in range(0, per, 5000):
                size = min(5000, per - start)
                pick = rng.integers(0, len(base), size)
                vecs = base[pick] + rng.normal(0, 0.02, (size, base.shape[1])).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
                rows = [
                    Passage(
                        id=new_id("passage"),
                        archive_id=archive.id,
                        text=texts[pick[i]],
                        tags=[],
                        embedding=vecs[i].tobytes(),
                        embedding_handle=LOCAL_HANDLE,
                    )
                    for i in range(size)
                ]
                await memory.archival.add_to_archive(archive.id, rows)
            await memory.archives.set_attached(agent.id, archive.id, True)
        return agent.id
    finally:
        await memory.close()


def search(url: str, agent_id: str, iterations: int) -> dict[str, object]:
    with httpx.Client(base_url=url, timeout=120) as c:
        with Timer() as cold:
            c.post("/v1/passages/search", json={"agent_id": agent_id, "query": QUERIES[0]})
        samples = []
        for i in range(iterations):
            body = {
                "agent_id": agent_id,
                "query": f"{QUERIES[i % len(QUERIES)]} ({i})",
                "limit": 10,
            }
            with Timer() as t:
                r = c.post("/v1/passages/search", json=body)
            samples.append(t.ms)
            assert r.status_code == 200 and len(r.json()) == 10, r.text
    return {"cold_first_search_ms": round(cold.ms, 1), "search_http": summary(samples)}


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        t0 = time.perf_counter()
        agent_id = asyncio.run(fill(db_url, args.quick))
        fill_s = time.perf_counter() - t0
        with running_gateway(db_url, rate_limit_rps=0) as srv:
            ingestion = ingest(srv.url, args.quick)
            searched = search(srv.url, agent_id, 40 if args.quick else 300)
    per = PER_ARCHIVE // 10 if args.quick else PER_ARCHIVE
    emit(
        "sources",
        {
            "quick": args.quick,
            "ingestion": ingestion,
            "passages_search": {
                "archives": ARCHIVES,
                "passages": ARCHIVES * per,
                "fill_s": round(fill_s, 1),
                **searched,
            },
            "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
        },
    )


if __name__ == "__main__":
    main()
