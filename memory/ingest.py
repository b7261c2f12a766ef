"""Uploaded files to text and chunks: the accepted types, PDF through pypdf, line chunks.

A file's text keeps its lines (the file tools number them); a PDF page starts with a
`[Page N]` line. A chunk is a run of whole lines (a longer line is cut) of about
`chunk_size` characters, tagged `lines:A-B` (1-based) and, for PDFs, `page:N`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import PurePosixPath

PDF = "application/pdf"
TEXT_TYPES = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".log": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".json": "application/json",
    ".jsonl": "application/jsonl",
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".yaml": "application/x-yaml",
    ".yml": "application/x-yaml",
    ".toml": "application/toml",
    ".ini": "text/plain",
    ".sql": "application/sql",
    ".css": "text/css",
}
CODE = (
    ".py .js .mjs .ts .tsx .jsx .java .kt .c .h .cc .cpp .hpp .cs .go .rs .rb .php .swift "
    ".scala .sh .bash .r .lua .pl .dart .m .vue .svelte"
).split()
TYPES = {**TEXT_TYPES, **dict.fromkeys(CODE, "text/x-source"), ".pdf": PDF}


class UnsupportedFile(ValueError):
    """The file's type is not one this server reads (HTTP 415)."""


@dataclass(slots=True)
class Parsed:
    text: str
    pages: int | None = None
    line_pages: list[int] = field(default_factory=list)  # per line: its page (PDF)


@dataclass(slots=True)
class Chunk:
    text: str
    tags: list[str]


def file_type(name: str, data: bytes) -> str:
    """The mime type of an upload by its extension, checked against its bytes; else
    UnsupportedFile naming what is accepted."""
    ext = PurePosixPath(name).suffix.lower()
    kind = TYPES.get(ext)
    if kind is None:
        raise UnsupportedFile(
            f"unsupported file type {ext or '(no extension)'!r} of {name!r}; accepted: "
            f"{', '.join(sorted(TYPES))}"
        )
    if kind == PDF:
        if not data.startswith(b"%PDF-"):
            raise UnsupportedFile(f"{name!r} is not a PDF (no %PDF- header)")
    else:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnsupportedFile(f"{name!r} is not UTF-8 text ({exc.reason})") from exc
    return kind


def parse(data: bytes, kind: str) -> Parsed:
    """The file's text (blocking: run it off the event loop)."""
    if kind != PDF:
        text = data.decode("utf-8").replace("\r\n", "\n")
        return Parsed(text)
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    lines: list[str] = []
    line_pages: list[int] = []
    for number, page in enumerate(reader.pages, start=1):
        page_lines = [f"[Page {number}]", *(page.extract_text() or "").splitlines()]
        lines += page_lines
        line_pages += [number] * len(page_lines)
    return Parsed("\n".join(lines), len(reader.pages), line_pages)


def from_text(text: str, kind: str) -> Parsed:
    """A file's text as parsed before (an imported file): a PDF's `[Page N]` lines give
    its pages again."""
    if kind != PDF:
        return Parsed(text)
    line_pages: list[int] = []
    page = 1
    for line in text.split("\n"):
        if line.startswith("[Page ") and line.endswith("]") and line[6:-1].isdigit():
            page = int(line[6:-1])
        line_pages.append(page)
    return Parsed(text, max(line_pages, default=1), line_pages)


def chunk(parsed: Parsed, chunk_size: int = 800) -> list[Chunk]:
    out: list[Chunk] = []
    buf: list[str] = []
    size, first = 0, 1

    def flush(last: int) -> None:
        nonlocal buf, size
        text = "\n".join(buf).strip()
        if text:
            tags = [f"lines:{first}-{last}"]
            if parsed.line_pages:
                tags.append(f"page:{parsed.line_pages[first - 1]}")
            out.append(Chunk(text, tags))
        buf, size = [], 0

    for number, line in enumerate(parsed.text.split("\n"), start=1):
        starts_page = bool(parsed.line_pages) and line.startswith("[Page ") and number > 1
        if buf and (size + len(line) > chunk_size or starts_page):
            flush(number - 1)
        if not buf:
            first = number
        while len(line) > chunk_size:  # a long line (minified JSON, a PDF paragraph): cut
            buf.append(line[:chunk_size])
            flush(number)
            first, line = number, line[chunk_size:]
        buf.append(line)
        size += len(line) + 1
    flush(len(parsed.text.split("\n")))
    return out
