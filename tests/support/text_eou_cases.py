"""Text never trained on, for the end-of-utterance classifier's tests and bench/text_eou.py:
each utterance complete, each of its prefixes cut at a word boundary inside a sentence not
(at a sentence's end it is: a turn may stop there).

- `heldout()`: the dialogue turns of chatterbot-corpus 1.3.3 (BSD-3-Clause) and
  chitchat-dataset 0.9.0 (MIT) that scripts/train_text_eou.py holds apart
  (text_eou_heldout.tsv, written by it); `source` says which.
- `real()`: the project's real recorded speech's transcripts (tests/support/real_speech.py):
  the LibriVox sentences, the card-game commands and the phone conversation's turns (after
  the other speaker's turn as the question when it ends with "?"). Empty pieces when the
  packages that hold them are not installed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HELDOUT = Path(__file__).with_name("text_eou_heldout.tsv")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Case:
    text: str
    question: str | None
    complete: bool
    source: str


def prefixes(utterance: str) -> list[tuple[str, bool]]:
    """Every word-boundary prefix of `utterance`, the whole last, with whether it ends a
    sentence."""
    out: list[tuple[str, bool]] = []
    done: list[str] = []
    for sentence in _SENTENCE_END.split(utterance.strip()):
        ws = sentence.split()
        for k in range(1, len(ws) + 1):
            out.append((" ".join([*done, *ws[:k]]), k == len(ws)))
        done += ws
    return out


def cases(question: str | None, utterance: str, source: str) -> list[Case]:
    return [Case(t, question, done, source) for t, done in prefixes(utterance)]


def heldout_turns() -> list[tuple[str, str | None, str]]:
    """(source, question or None, utterance) of every held-apart turn."""
    out: list[tuple[str, str | None, str]] = []
    for line in HELDOUT.read_text().splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        source, q, u = line.split("\t", 2)
        out.append((source, q or None, u))
    return out


def heldout() -> list[Case]:
    return [c for source, q, u in heldout_turns() for c in cases(q, u, source)]


def real() -> list[Case]:
    from tests.support.real_speech import clips, conversation

    out: list[Case] = []
    for clip in clips():
        if clip.text:
            source = "librivox" if clip.name.startswith("sense") else "cards"
            out += cases(None, clip.text, source)
    found = conversation()
    if found is not None:
        turns = found[1]
        for before, turn in zip([None, *turns], turns, strict=False):
            q = before.text if before is not None and before.text.endswith("?") else None
            out += cases(q, turn.text, "conversation")
    return out
