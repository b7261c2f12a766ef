"""Letta's file tools over the folders attached to an agent: open_files, grep_files,
semantic_search_files. Read-only and quick: voice-safe (the spoken filler covers them)."""

from __future__ import annotations

import re
from typing import Any

from agents.tools.registry import REGISTRY, ToolContext, ToolError
from memory.archival import SearchFilter
from memory.files import FileData
from memory.open_files import OpenFiles, max_open

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


@REGISTRY.register(voice_safe=True)
async def open_files(
    ctx: ToolContext, file_requests: list[dict[str, Any]], close_all_others: bool = False
) -> str:
    """Open files (or a window of their lines) so their text stays in your context.

    Args:
        file_requests: Files to open: objects with file_name ("folder/file"), and optionally
            offset (the first line, 0-based) and length (lines).
        close_all_others: Close every other open file first.
    """
    files, names = await _files(ctx)
    store = OpenFiles(ctx.memory.db)
    if close_all_others:
        await store.close(ctx.agent.id)
    limit = max_open(ctx.agent.metadata)
    report: list[str] = []
    for req in file_requests[:limit]:
        if not isinstance(req, dict) or not isinstance(req.get("file_name"), str):
            raise ToolError("each file request needs a file_name")
        f = _find(req["file_name"], files, names)
        offset, length = req.get("offset"), req.get("length")
        desc, text, closed = await store.open_window(
            ctx.agent.id,
            f,
            names[f.id],
            limit,
            int(offset) if isinstance(offset, int) else 0,
            int(length) if isinstance(length, int) else None,
        )
        report.append(f"Opened {desc}." + (f" Closed: {', '.join(closed)}." if closed else ""))
        report.append(text)
    return "\n".join(report)


@REGISTRY.register(voice_safe=True)
async def grep_files(
    ctx: ToolContext,
    pattern: str,
    include: str | None = None,
    context_lines: int = 1,
    offset: int = 0,
) -> str:
    """Search the lines of your files with a regular expression.

    Args:
        pattern: A Python regular expression (case-insensitive).
        include: Only files whose name matches this regular expression.
        context_lines: Lines shown around each match (0-5).
        offset: Skip this many matches (to page through many).
    """
    if len(pattern) > 200:
        raise ToolError("pattern is longer than 200 characters")
    try:
        rx = re.compile(pattern, re.IGNORECASE)
        only = re.compile(include, re.IGNORECASE) if include else None
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from exc
    files, names = await _files(ctx)
    around = max(0, min(context_lines, 5))
    hits: list[str] = []
    total = 0
    for f in files:
        if only and not only.search(names[f.id]):
            continue
        lines = (f.content or "").split("\n")
        for i, line in enumerate(lines):
            if not rx.search(line):
                continue
            total += 1
            if total <= offset or len(hits) >= MAX_MATCHES:
                continue
            lo, hi = max(0, i - around), min(len(lines), i + around + 1)
            shown = "\n".join(f"  {n + 1}: {lines[n][:300]}" for n in range(lo, hi))
            hits.append(f"{names[f.id]}:{i + 1}\n{shown}")
    if not hits:
        return f"No matches for {pattern!r}."
    more = (
        f" Showing {offset + 1}-{offset + len(hits)}; use offset to see more."
        if total > offset + len(hits)
        else ""
    )
    return f"{total} matches.{more}\n" + "\n".join(hits)


@REGISTRY.register(voice_safe=True)
async def semantic_search_files(ctx: ToolContext, query: str, limit: int = 5) -> str:
    """Search your files by meaning; returns the best passages with file, page and lines.

    Args:
        query: What to look for.
        limit: Number of passages (1-20).
    """
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
