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
# the first sentence is cut at its first clause boundary (, ; : — –) with at least this many
# words before it, as voice stacks do: TTS starts on a short chunk, and with a streaming
# model the first audio does not wait for the whole first sentence to be generated
FIRST_CLAUSE_WORDS = 4
_CLAUSE = re.compile(r"[,;:—–](?=\s)")
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)|\n\s*\n|\n(?=\s*[-*+•#\d])")


def clean_for_speech(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _MARKDOWN.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


class SentenceSplitter:
    def __init__(self, first_clause_words: int = FIRST_CLAUSE_WORDS) -> None:
        self._buf = ""
        self._emitted = 0
        self.first_clause_words = first_clause_words  # 0: never cut at a clause

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
        sentence = self._sentence_end()
        if self._emitted or not self.first_clause_words:
            return sentence
        clause = self._first_clause(sentence)
        return clause if clause is not None else sentence

    def _sentence_end(self) -> int | None:
        buf = self._buf
        for m in _SENTENCE_END.finditer(buf):
            end = m.end()
            if end >= len(buf):  # need the following whitespace to know the sentence ended
                return None
            if buf[m.start()] == "." and self._is_abbreviation_or_number(buf, m.start()):
                continue
            if len(clean_for_speech(buf[:end])) < 2:
                continue
            return end
        return None

    def _first_clause(self, sentence: int | None) -> int | None:
        """The end of the first clause of the first sentence with enough words before it
        (the whitespace after the mark must have arrived), if before the sentence's end."""
        buf = self._buf if sentence is None else self._buf[:sentence]
        for m in _CLAUSE.finditer(buf):
            if m.end() >= len(self._buf):
                return None
            if len(clean_for_speech(buf[: m.end()]).split()) >= self.first_clause_words:
                return m.end() + 1  # with the space: the rest starts at its first word
        return None

    @staticmethod
    def _is_abbreviation_or_number(buf: str, dot: int) -> bool:
        word = re.search(r"([A-Za-z.]+)$", buf[:dot])
        if word and word.group(1).lower().strip(".") in _ABBREV:
            return True
        if word and len(word.group(1)) == 1 and word.group(1).isupper():  # an initial: "J. Smith"
            return True
        return dot + 1 < len(buf) and buf[dot + 1].isdigit()


def last_sentence(text: str) -> str | None:
    """The last sentence of `text`: of a reply the caller heard, the agent's question that the
    caller's next words answer (the `words` turn policy reads them together)."""
    splitter = SentenceSplitter(first_clause_words=0)
    sentences = splitter.push(text)
    rest = splitter.flush()
    return rest or (sentences[-1] if sentences else None)
