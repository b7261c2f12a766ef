"""The repository describes the system as it is: no words about how the work on it was
organised (numbered units of work, the sitting that wrote a line...) in code, comments, tests,
benches or docs. History lives in CHANGELOG.md by version and date, and in git."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = (
    "README.md",
    "CHANGELOG.md",
    "SECURITY.md",
    "Dockerfile",
    "docker-compose.yml",
    "pyproject.toml",
    "docs",
    "voice_gateway",
    "agents",
    "memory",
    "tests",
    "bench",
    "scripts",
    "web_client",
    "deploy",
    ".ci",
)
SUFFIXES = {".py", ".md", ".js", ".html", ".css", ".sh", ".toml", ".yml", ".yaml", ".conf", ""}
SKIP_DIRS = {"__pycache__", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache"}

# A numbered unit of work ("stop" or "issue" and a number, also in a heading's anchor),
# or words that point at the work instead of the system. A stop as a pause ("a 400 ms
# stop"), `stop_event` or "stop" as a verb do not match: the number must follow the word;
# "this session's" is a voice session's, not the sitting that wrote the line.
WORDS = re.compile(
    r"\bstops?[ -]#?\d"
    r"|\bissues?[ -]#?\d"
    r"|\bthis stop\b"
    r"|\bthis session\b(?!['’]s)"
    r"|\bsince stop\b",
    re.IGNORECASE,
)


def scanned_files() -> list[Path]:
    out: list[Path] = []
    for name in ROOTS:
        path = ROOT / name
        if path.is_file():
            out.append(path)
            continue
        for file in sorted(path.rglob("*")):
            parts = set(file.relative_to(ROOT).parts)
            if file.is_file() and file.suffix in SUFFIXES and not parts & SKIP_DIRS:
                out.append(file)
    return out


def hits(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if WORDS.search(line)]


def test_the_pattern_finds_work_words_and_spares_the_system_s_own() -> None:
    work = (
        "st" + "op 42",
        "St" + "ops 42-46",
        "is" + "sue 20",
        "is" + "sue #16",
        "st" + "op #9",
        "measure-is" + "sue-20",
        "since st" + "op",
        "in th" + "is session",
        "this st" + "op's",
    )
    system = (
        "a 400 ms stop",
        "stop_event.set()",
        "stop the reply",
        "no full stop: 40 ms",
        "the session's token",
        "this session's transcript",
        "in the same session as the write",
        "this work runs on the event loop",
        "stop reason",
        "issues a token",
        "stops at 5 s",
    )
    for line in work:
        assert WORDS.search(line), line
    for line in system:
        assert not WORDS.search(line), line


def test_no_work_words_in_the_repository() -> None:
    files = scanned_files()
    assert len(files) > 300, "the scan found too few files: is ROOT right?"
    found = [
        f"{file.relative_to(ROOT)}:{n}: {line[:120]}"
        for file in files
        for n, line in hits(file.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not found, "describe the system as it is (history goes to CHANGELOG.md):\n" + "\n".join(
        found
    )
