"""Background file processing: parse, chunk and embed uploads in a bounded worker.

At most `max_concurrent` files are processed at once, on one thread of their own (parsing and
embedding never take the embedding pool live searches use), in batches of `batch` chunks, so
a live call's query embedding waits for at most one batch on a busy CPU. A failure removes
the file's chunks (nothing half-stored) and sets `processing_status` "error" with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from sqlalchemy import delete, select, update

from memory.archival import bump
from memory.files import FileData, FolderData
from memory.ids import utcnow
from memory.ingest import chunk, from_text, parse
from memory.open_files import open_for_attached
from memory.orm import FileRecord, Passage
from memory.service import Memory

log = logging.getLogger(__name__)
UNFINISHED = ("pending", "parsing", "embedding")


class FileJobs:
    def __init__(self, memory: Memory, max_concurrent: int = 1, batch: int = 8) -> None:
        self.memory = memory
        self.batch = batch
        self._sem = asyncio.Semaphore(max_concurrent)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")
        self._tasks: set[asyncio.Task[None]] = set()

    async def recover(self, stale_s: float = 600.0) -> None:
        """Uploads a stopped process did not finish cannot resume (their bytes are gone).
        Only those idle for `stale_s` (a live job writes every batch): another gateway
        instance may be processing the rest."""
        cutoff = utcnow() - timedelta(seconds=stale_s)
        async with self.memory.db.write() as s:
            await s.execute(
                update(FileRecord)
                .where(FileRecord.status.in_(UNFINISHED), FileRecord.updated_at < cutoff)
                .values(status="error", error_message="interrupted by a restart: upload again")
            )

    def submit(
        self, folder: FolderData, file: FileData, data: bytes, text: str | None = None
    ) -> None:
        """Process an upload's bytes, or (`text`) the text of an imported file."""
        job = self._run(folder, file, data, text)
        task = asyncio.create_task(job, name=f"ingest {file.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, folder: FolderData, file: FileData, data: bytes, text: str | None) -> None:
        files = self.memory.files
        async with self._sem:
            loop = asyncio.get_running_loop()
            try:
                await files.set(file.id, status="parsing")
                if text is not None:
                    parsed = from_text(text, file.file_type)
                else:
                    parsed = await loop.run_in_executor(self._pool, parse, data, file.file_type)
                chunks = chunk(parsed, folder.chunk_size)
                await files.set(
                    file.id,
                    status="embedding",
                    content=parsed.text,
                    pages=parsed.pages,
                    total_chunks=len(chunks),
                    chunks_embedded=0,
                )
                if text is None:  # an upload (an imported agent keeps the windows it had)
                    # its text opens in the context of the agents its folder is attached to
                    # (their prompts follow: a new block is a new prompt, agents/context.py)
                    await open_for_attached(self.memory.db, file.id)
                archive_id = await self.memory.folders.archive_id(folder.id)
                archival = self.memory.archival
                embedder = archival.embedder_for(folder.embedding)
                done = 0
                for i in range(0, len(chunks), self.batch):
                    part = chunks[i : i + self.batch]
                    vectors = await loop.run_in_executor(
                        self._pool, embedder.embed_sync, [c.text for c in part]
                    )
                    rows = archival.rows_from(
                        folder.embedding,
                        archive_id,
                        [c.text for c in part],
                        vectors,
                        [c.tags for c in part],
                        file_id=file.id,
                    )
                    done += len(rows)
                    async with self.memory.db.write() as s:
                        s.add_all(rows)
                        await bump(s, archive_id)
                        await s.execute(
                            update(FileRecord)
                            .where(FileRecord.id == file.id)
                            .values(chunks_embedded=done, updated_at=utcnow())
                        )
                await files.set(file.id, status="completed")
            except asyncio.CancelledError:
                await asyncio.shield(self._failed(file, "cancelled: the server stopped"))
                raise
            except Exception as exc:  # a broken PDF, an embedder failure, a deleted file
                log.warning("processing %s failed", file.id, exc_info=True)
                await self._failed(file, f"{type(exc).__name__}: {exc}"[:2000])

    async def _failed(self, file: FileData, reason: str) -> None:
        try:
            async with self.memory.db.write() as s:
                if await s.scalar(select(FileRecord.id).where(FileRecord.id == file.id)) is None:
                    return  # deleted meanwhile: its chunks went with it
                await s.execute(delete(Passage).where(Passage.file_id == file.id))
                await s.execute(
                    update(FileRecord)
                    .where(FileRecord.id == file.id)
                    .values(
                        status="error", error_message=reason, chunks_embedded=0, updated_at=utcnow()
                    )
                )
                archive_id = await self.memory.folders.archive_id(file.folder_id)
                await bump(s, archive_id, deleted=True)
        except Exception:
            log.exception("could not mark %s failed", file.id)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
