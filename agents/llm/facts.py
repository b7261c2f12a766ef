"""Deterministic fact handling for the offline demo model: extract, merge, look up."""

from __future__ import annotations

import re

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "Name",
        re.compile(
            r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+"
            r"([A-Za-z][\w'-]*(?:\s+[A-Za-z][\w'-]*)?)",
            re.I,
        ),
    ),
    (
        "Location",
        re.compile(
            r"\b(?:i live in|i'm from|i am from|i moved to|i'm living in)\s+"
            r"([A-Za-z][\w' -]*?)(?=[.,!?;]|\s+(?:and|but|now|with)\b|$)",
            re.I,
        ),
    ),
    ("Job", re.compile(r"\bi work (?:as|at|for)\s+([^.,!?;]+)", re.I)),
]
_FAVORITE = re.compile(r"\bmy fav(?:ou?rite)\s+(\w+)\s+is\s+([^.,!?;]+)", re.I)
_REMEMBER = re.compile(r"\bremember that\s+([^.!?]+)", re.I)
_STOPS = {"and", "but", "i", "from", "in", "the", "so", "or"}
_NOT_NAMES = {"not", "sorry", "just", "here", "back", "going", "fine", "good", "calling", "the"}


def extract_facts(text: str) -> dict[str, str]:
    """Key -> value facts stated by the user in `text` (later statements win)."""
    facts: dict[str, str] = {}
    for key, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            value = m.group(1).strip(" '")
            if key == "Name":
                words = value.split()
                # a second word counts only as a capitalised surname ("Mary Jones")
                if len(words) > 1 and (not words[1][0].isupper() or words[1].lower() in _STOPS):
                    words = words[:1]
                if words[0].lower() in _NOT_NAMES:
                    continue
                value = " ".join(words)
                value = " ".join(w.capitalize() for w in value.split())
            elif key == "Location":
                value = " ".join(w if w[:1].isupper() else w.capitalize() for w in value.split())
            facts[key] = value
    for m in _FAVORITE.finditer(text):
        facts[f"Favorite {m.group(1).lower()}"] = m.group(2).strip()
    for m in _REMEMBER.finditer(text):
        fact = m.group(1).strip()
        facts[f"Note: {fact[:40]}"] = fact
    return facts


def merge_facts(block: str, facts: dict[str, str]) -> str:
    """Fold facts into a block of 'Key: value' lines, replacing a key's old value."""
    lines = [ln for ln in block.split("\n") if ln.strip()]
    for key, value in facts.items():
        if key.startswith("Note: "):
            line = f"- {value}"
            if line not in lines:
                lines.append(line)
            continue
        prefix = f"{key}:"
        idx = next((i for i, ln in enumerate(lines) if ln.lower().startswith(prefix.lower())), None)
        if idx is None:
            lines.append(f"{prefix} {value}")
        else:
            lines[idx] = f"{prefix} {value}"
    return "\n".join(lines)


def block_facts(block: str) -> dict[str, str]:
    facts: dict[str, str] = {}
    for line in block.split("\n"):
        key, sep, value = line.partition(":")
        if sep and key.strip() and value.strip():
            facts[key.strip().lower()] = value.strip()
    return facts


def lookup(question: str, block: str) -> tuple[str, str] | None:
    """Answer a 'what is my X / where do I live' question from 'Key: value' lines."""
    facts = block_facts(block)
    q = question.lower()
    if re.search(r"\b(my name|who am i|called)\b", q) and "name" in facts:
        return "name", facts["name"]
    if re.search(r"\b(where do i live|where am i from|where i live|my city|my location)\b", q):
        if "location" in facts:
            return "location", facts["location"]
    m = re.search(r"\bmy fav(?:ou?rite)\s+(\w+)", q)
    if m and f"favorite {m.group(1)}" in facts:
        return f"favorite {m.group(1)}", facts[f"favorite {m.group(1)}"]
    if re.search(r"\b(my job|what do i do|where do i work)\b", q) and "job" in facts:
        return "job", facts["job"]
    return None
