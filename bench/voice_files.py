"""Upload processing vs live calls: N concurrent voice calls (bench/voice_concurrency.py's load:
real webrtcvad, the agent loop and SQLite in a `voice-gateway serve`-like process, instant
STT/LLM/TTS) measured twice on one gateway: alone, then while 20 50-page PDFs are uploaded and
processed (pypdf parsing, chunking, local MiniLM embedding on the file-job worker's thread).

Reports per level the missed turns (`turns_unanswered`: no reply audio within the deadline of
the turn's endpoint), reply and frame latency p99, the files processed during the window
(pages, chunks) and the load average. Missed turns with uploads must stay those without.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from _common import emit, parser
from _voice import load, start_gateway
from voice_concurrency import (
    CYCLE_S,
    ENDPOINT_MS,
    LONG_SPEECH,
    REPLY_DEADLINE_S,
    cycle_pattern,
    run_level,
    settle,
)

from tests.support.pdf import write_pdf

PAGES = 50


def pdf(k: int) -> bytes:
    pages = [
        [f"Document {k}, page {n}: the pump of unit {k}-{n} is checked every {n % 9 + 1} days."]
        + [f"Line {i} of page {n}: valve {k}.{n}.{i} opens at {i * n % 97} kPa." for i in range(6)]
        for n in range(1, PAGES + 1)
    ]
    return write_pdf(pages)


class Uploads(threading.Thread):
    """Uploads the files after `delay_s` (when the calls stream), then polls until all are
    processed; `done_s` is how long that took from the first upload."""

    def __init__(self, url: str, files: int, delay_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.files, self.delay_s = url, files, delay_s
        self.done_s: float | None = None
        self.status: dict[str, int] = {}
        self.chunks = 0
        self.folder = ""
        self.ids: list[str] = []

    def embedded(self) -> dict[str, int]:
        """Files done and chunks embedded so far (taken when the calls end)."""
        with httpx.Client(base_url=self.url, timeout=120) as http:
            rows = [http.get(f"/v1/folders/{self.folder}/files/{i}").json() for i in self.ids]
        return {
            "files_completed": sum(r["processing_status"] == "completed" for r in rows),
            "chunks_embedded": sum(r.get("chunks_embedded") or 0 for r in rows),
        }

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as http:
            folder = http.post("/v1/folders/", json={"name": f"bench-{time.time()}"}).json()["id"]
            self.folder, ids = folder, self.ids
            blobs = [pdf(k) for k in range(self.files)]
            time.sleep(self.delay_s)
            t0 = time.monotonic()
            for k, blob in enumerate(blobs):
                resp = http.post(
                    f"/v1/folders/{folder}/upload",
                    files={"file": (f"doc{k}.pdf", blob, "application/pdf")},
                )
                resp.raise_for_status()
                ids.append(resp.json()["id"])
            while time.monotonic() - t0 < 900:
                rows = [http.get(f"/v1/folders/{folder}/files/{i}").json() for i in ids]
                states = [r["processing_status"] for r in rows]
                if all(s in ("completed", "error") for s in states):
                    self.done_s = round(time.monotonic() - t0, 1)
                    self.chunks = sum(r.get("total_chunks") or 0 for r in rows)
                    break
                time.sleep(1.0)
            self.status = {s: states.count(s) for s in set(states)}


def brief(level: dict[str, Any]) -> dict[str, Any]:
    reply = level["reply"]
    return {
        "calls": level["calls"],
        "turns": reply["turns"],
        "turns_unanswered": reply["turns_unanswered"],
        "reply_p99_ms_minus_endpoint": reply["latency_minus_endpoint"].get("p99_ms"),
        "client_frame_p99_ms": level["client_frame_latency"].get("p99_ms"),
        "frames_dropped": level["frames_dropped"],
        "failed_calls": level["failed_calls"],
        "loadavg_1m_start_end": level["loadavg_1m_start_end"],
        "fail_reasons": level["fail_reasons"],
    }


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--loaders", type=int, default=2)
    args = p.parse_args()
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    pattern = cycle_pattern(CYCLE_S, LONG_SPEECH, ENDPOINT_MS)
    out: dict[str, Any] = {"calls": args.calls, "files": args.files, "pages_per_file": PAGES}
    with tempfile.TemporaryDirectory() as tmp:
        gw = start_gateway(
            f"sqlite+aiosqlite:///{Path(tmp) / 'bench-files.db'}",
            llm={"reply": "Sure thing."},
            stt="instant",
            tts="instant",
            sleeptime_every_turns=10**6,
            idle_timeout_s=600.0,
            endpoint_silence_ms=ENDPOINT_MS,
            log_name="voice_files",
            instrument_frames=True,
            max_file_bytes=5_000_000,
        )
        try:
            agents = [gw.agent(name=f"caller-{i}") for i in range(args.calls)]
            for label, files in (("without_uploads", 0), ("with_uploads", args.files)):
                settle([gw])
                uploads = Uploads(gw.url, files, 3.0 + args.calls * 0.01) if files else None
                if uploads:
                    uploads.start()
                level = run_level(
                    gw, agents, args.calls, seconds, args.loaders, pattern, "raw", None,
                    REPLY_DEADLINE_S,
                )  # fmt: skip
                row = brief(level)
                if uploads:
                    row["during_the_calls"] = uploads.embedded()
                    uploads.join(900)
                    row |= {
                        "files_status": uploads.status,
                        "all_files_processed_in_s": uploads.done_s,
                        "pages": files * PAGES,
                        "chunks": uploads.chunks,
                    }
                out[label] = row
                print(json.dumps({label: row}), file=sys.stderr)
        finally:
            gw.stop()
    out["no_missed_turns_added"] = (
        out["with_uploads"]["turns_unanswered"] <= out["without_uploads"]["turns_unanswered"]
    )
    emit("voice_files", {**out, **load()})


if __name__ == "__main__":
    main()
