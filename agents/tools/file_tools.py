"""Letta's file tools over the folders attached to an agent: open_files, grep_files,
semantic_search_files (what the model is told: agents/tools/file_schemas.py). Read-only and
quick: voice-safe (the spoken filler covers them)."""

from __future__ import annotations

import re
from typing import Any

from agents.tools.file_schemas import describe
from agents.tools.registry import REGISTRY, ToolContext, ToolError
from memory.archival import SearchFilter
from memory.files import FileData
from memory.open_files import OpenFiles, max_open, window_chars

MAX_MATCHES = 20


async def _files(ctx: ToolContext) -> tuple[list[FileData], dict[str, str]]:
    """The agent's readable files and their names ("folder/file") by id."""
    folders = {f.id: f.name for f in await ctx.memory.folders.agent_folders(ctx.agent.id)}
    files = [f for f in await ctx.memory.files.of_agent(ctx.agent.id) if f.content is not None]
    if not folders:
        raise ToolError("no folders are attached to this agent")
    return files, {f.id: f"{folders.get(f.folder_id, '?')}/{f.file_name}" for f in files}


def _find(name: str, files: list[FileData], names: dict[str, str]) -> FileData:
    for f in files:
        if name in (names[f.id], f.file_name):
            return f
    known = ", ".join(sorted(names.values())) or "none"
    raise ToolError(f"no readable file named {name!r}; files: {known}")


def _line(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolError(f"{name} must be a whole number of at least 0")
    return value


@REGISTRY.register(voice_safe=True)
async def open_files(
    ctx: ToolContext, file_requests: list[dict[str, Any]], close_all_others: bool = False
) -> str:
    """Open files (or a window of their lines) in the files section of your context."""
    files, names = await _files(ctx)
    if not isinstance(file_requests, list) or not file_requests:
        raise ToolError("file_requests needs at least one file request")
    limit = max_open(ctx.agent.metadata)
    if len(file_requests) > limit:
        raise ToolError(f"at most {limit} files can be open at once")
    wanted = []
    for req in file_requests:
        if not isinstance(req, dict) or not isinstance(req.get("file_name"), str):
            raise ToolError("each file request needs a file_name")
        f = _find(req["file_name"], files, names)
        offset, length = _line(req.get("offset"), "offset"), _line(req.get("length"), "length")
        if length == 0:
            raise ToolError("length must be at least 1")
        lines = len((f.content or "").splitlines())
        if offset is not None and offset >= max(lines, 1):
            raise ToolError(f"{names[f.id]} has {lines} lines; offset {offset} is past its end")
        wanted.append((f, offset, length))
    store = OpenFiles(ctx.memory.db)
    if close_all_others:
        await store.close(ctx.agent.id)
    chars = window_chars(ctx.agent.metadata)
    opened, closed = [], []
    for f, offset, length in wanted:
        desc, _, gone = await store.open_window(
            ctx.agent.id, f, names[f.id], limit, offset, length, chars
        )
        opened.append(desc)
        closed += [c for c in gone if c not in closed]
    report = f"* Opened {', '.join(opened)}"
    if closed:
        report += f"\nNote: closed {', '.join(closed)} (at most {limit} files stay open)"
    return report


@REGISTRY.register(voice_safe=True)
async def grep_files(
    ctx: ToolContext,
    pattern: str,
    include: str | None = None,
    context_lines: int = 1,
    offset: int = 0,
) -> str:
    """Search the lines of your files for a regular expression (case-insensitive)."""
    if len(pattern) > 200:
        raise ToolError("pattern is longer than 200 characters")
    try:
        rx = re.compile(pattern, re.IGNORECASE)
        only = re.compile(include, re.IGNORECASE) if include else None
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from exc
    files, names = await _files(ctx)
    around, offset = max(0, min(context_lines, 5)), max(0, offset)
    per_file: dict[str, int] = {}
    page: list[str] = []
    total = 0
    for f in files:
        if only and not only.search(names[f.id]):
            continue
        lines = (f.content or "").splitlines()
        for i, line in enumerate(lines):
            if not rx.search(line):
                continue
            total += 1
            per_file[names[f.id]] = per_file.get(names[f.id], 0) + 1
            if total <= offset or len(page) >= MAX_MATCHES:
                continue
            lo, hi = max(0, i - around), min(len(lines), i + around + 1)
            shown = "\n".join(
                f"{'>' if n == i else ' '} {n + 1}: {lines[n][:300]}" for n in range(lo, hi)
            )
            page.append(f"=== {names[f.id]}:{i + 1} ===\n{shown}")
    if not total:
        return f"No matches found for pattern: '{pattern}'"
    head = [f"Found {total} total matches across {len(per_file)} files"]
    head += [f"- {name}: {count} matches" for name, count in per_file.items()]
    if not page:
        return "\n".join([*head, f"No matches from offset {offset}: there are {total}."])
    head.append(f"Showing matches {offset + 1}-{offset + len(page)} of {total}:")
    if total > offset + len(page):
        page.append(f"More matches: grep_files with offset={offset + len(page)} shows the next.")
    return "\n".join(head) + "\n\n" + "\n\n".join(page)


@REGISTRY.register(voice_safe=True)
async def semantic_search_files(ctx: ToolContext, query: str, limit: int = 5) -> str:
    """Search your files by meaning; returns the best passages with file, page and lines."""
    folders = await ctx.memory.folders.agent_folders(ctx.agent.id)
    if not folders:
        raise ToolError("no folders are attached to this agent")
    archive_ids = [await ctx.memory.folders.archive_id(f.id) for f in folders]
    states = await ctx.memory.archival.archive_states(archive_ids)
    hits = await ctx.memory.archival.search_archives(
        states, query, max(1, min(limit, 20)), SearchFilter()
    )
    if not hits:
        return "No matching passages in your files."
    names: dict[str, str] = {}
    for f in await ctx.memory.files.of_agent(ctx.agent.id):
        names[f.id] = f.file_name
    out = []
    for h in hits:
        where = ", ".join(t.replace(":", " ") for t in h.tags)
        out.append(f"[{names.get(h.file_id or '', 'file')} ({where})]\n{h.text}")
    return "\n\n".join(out)


describe(REGISTRY)
