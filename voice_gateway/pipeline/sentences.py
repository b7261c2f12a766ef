"""Cut streamed LLM text into speakable sentences as the deltas arrive."""

from __future__ import annotations

import re

_ABBREV = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "st",
    "prof",
    "sr",
    "jr",
    "vs",
    "etc",
    "e.g",
    "i.e",
    "no",
    "approx",
    "mt",
    "ave",
    "inc",
    "ltd",
    "co",
    "u.s",
    "a.m",
    "p.m",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
}
_MARKDOWN = re.compile(r"(\*\*|__|\*|`{1,3}|^#{1,6}\s*|^\s*[-*+•]\s+|^\s*\d+\.\s+(?=\D))", re.M)
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
FIRST_CHUNK_MAX = 60


def clean_for_speech(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _MARKDOWN.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


class SentenceSplitter:
    def __init__(self, first_chunk_max: int = FIRST_CHUNK_MAX) -> None:
        self._buf = ""
        self._emitted = 0
        self.first_chunk_max = first_chunk_max

    def push(self, delta: str) -> list[str]:
        self._buf += delta
        out: list[str] = []
        while True:
            cut = self._find_cut()
            if cut is None:
                break
            sentence, self._buf = self._buf[:cut], self._buf[cut:]
            spoken = clean_for_speech(sentence)
            if spoken:
                out.append(spoken)
                self._emitted += 1
        return out

    def flush(self) -> str | None:
        rest, self._buf = clean_for_speech(self._buf), ""
        if rest:
            self._emitted += 1
        return rest or None

    def _find_cut(self) -> int | None:
        buf = self._buf
        for m in re.finditer(r"[.!?…]+[\"')\]]*(?=\s)|\n\s*\n|\n(?=\s*[-*+•#\d])", buf):
            end = m.end()
            if end >= len(buf):  # need the following whitespace to know the sentence ended
                return None
            if buf[m.start()] == "." and self._is_abbreviation_or_number(buf, m.start()):
                continue
            if len(clean_for_speech(buf[:end])) < 2:
                continue
            return end
        if self._emitted == 0 and len(buf) > self.first_chunk_max:
            # a fast first response: cut a long first sentence at a clause boundary
            for m in re.finditer(r"[,;:—–]\s", buf[: self.first_chunk_max * 2]):
                if m.end() >= 25:
                    return m.end()
        return None

    @staticmethod
    def _is_abbreviation_or_number(buf: str, dot: int) -> bool:
        word = re.search(r"([A-Za-z.]+)$", buf[:dot])
        if word and word.group(1).lower().strip(".") in _ABBREV:
            return True
        if word and len(word.group(1)) == 1 and word.group(1).isupper():  # an initial: "J. Smith"
            return True
        return dot + 1 < len(buf) and buf[dot + 1].isdigit()
