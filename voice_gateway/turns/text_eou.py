"""The words' own end-of-utterance signal: P(complete) of the speculative transcript at a pause,
read by a small local text classifier, given the agent's last question when there is one
("What's your phone number?" -> "five five five, one two" is not done, "five five five one two
three four" is).

`p_complete(text, question=None)` returns a probability in [0, 1] that the words so far are a
whole utterance, or None when the text cannot tell: empty, no word at all, a decoder loop
(`looks_looped`), or not English (mostly non-ASCII letters, or fewer than half of its words
known to the model's vocabulary). Case and punctuation are not read: whisper writes cut-off
prefixes as sentences with capitals and full stops ("He might even have been made."), so only
the words, the digits (spelt one by one: "555" reads as "five five five") and the question count.

The model: logistic regression over hashed features (2**18 buckets, crc32): the last one to
three words, their word classes (article, preposition, conjunction, subject, auxiliary, filler,
digit), the last word's ending, the length, the run of digits at the end, and the kind of
question asked (phone number, date, yes/no, ...) crossed with the last word, the length, the
digit run and the classes; the first word only crossed with the last word's class. Words of
the whole text (a bag of words, the first word alone) are left out: an utterance and all its
prefixes share them, and on a validation fifth of the training dialogues they lowered the
ranking of complete over unfinished (AUC 0.85 -> 0.83).
Trained by scripts/train_text_eou.py (fixed seed, numpy only, regenerates text_eou.npz bit
for bit) on dialogue from two PyPI packages: the English dialogues of chatterbot-corpus 1.3.3
(BSD-3-Clause) and 30,000 turns of people's chit-chat from chitchat-dataset 0.9.0 (MIT).
Every utterance is complete, every prefix of it cut at a word boundary inside a sentence is
not; generated phone-call answers (numbers by digit count, dates, lists, names, yes/no) and
fillers ("um", "and", "so") that leave words unfinished are added. The vocabulary is the
training words and Debian's SCOWL word list (text_eou_NOTICE.txt).

Measured by `python bench/text_eou.py` (P >= 0.5 read as complete):
- held-apart dialogue turns of both packages (tests/support/text_eou_heldout.tsv): 0.83 of
  1,202 complete utterances and 0.72 of 7,186 prefixes right; P < 0.2 is given to 51 % of
  the prefixes and is right 98 % of the time.
- the project's real transcripts (LibriVox, card games, the phone conversation;
  tests/support/real_speech.py, never trained on): 0.87 of 23 complete and 0.69 of 150
  prefixes; P < 0.2 covers 49 % of the prefixes, right 97 % of the time. P > 0.8 is right
  only about half the time: "the words run on" is the signal to trust, "complete" needs
  the audio too.
- cost: 0.05 ms median, 0.4-2.4 ms p99 per decision on one thread (runs on this shared
  2-core machine; load 50-100 ms, weights 1.2 MB). The bundled MiniLM encoder alone costs
  4.5 ms a sentence (memory/minilm.py) and had a p99 of 100-300 ms under load: too slow for
  every pause, and it would still need a head trained on the same data."""

from __future__ import annotations

import math
import re
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from voice_gateway.turns.transcript import DIGITS, looks_looped

WEIGHTS = Path(__file__).with_name("text_eou.npz")
BITS = 18
_MASK = (1 << BITS) - 1
_TOKEN = re.compile(r"[a-z]+|[0-9]")
_APOSTROPHE = re.compile("['\u2019]")
_SPOKEN = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_AUX = frozenset(
    "do does did is are was were can could would will should have has had may shall am".split()
)
_WH = frozenset("what where who whom whose why how which when".split())
# the kind of answer a question asks for, by its words (first match wins)
_KINDS: tuple[tuple[str, frozenset[str]], ...] = (
    ("zip", frozenset({"zip", "postcode", "postal"})),
    ("code", frozenset({"code", "pin", "digits"})),
    ("phone", frozenset({"phone", "number", "cell", "mobile"})),
    ("email", frozenset({"email", "e-mail"})),
    ("date", frozenset({"date", "birthday", "born", "day"})),
    ("time", frozenset({"time", "when"})),
    ("name", frozenset({"name", "spell"})),
    ("address", frozenset({"address", "street", "live"})),
)
MIN_KNOWN = 0.5  # below this share of known words the text is not read as English
MAX_FOREIGN = 0.2  # above this share of non-ASCII letters neither


def words(text: str) -> list[str]:
    """Lower-case words, digits spelt one by one; punctuation, case and apostrophes dropped
    ("I'm" and chat's "im" read the same)."""
    out: list[str] = []
    for tok in _TOKEN.findall(_APOSTROPHE.sub("", text.lower())):
        out.append(_SPOKEN[int(tok)] if tok.isdigit() else tok)
    return out


def question_kind(question: str | None) -> str:
    if question is None or not question.strip():
        return "none"
    qw = words(question)
    for kind, keys in _KINDS:
        if keys.intersection(qw):
            return kind
    if qw and qw[0] in _AUX:
        return "yn"
    if qw and qw[0] in _WH:
        return "wh"
    return "other"


def _bucket(n: int) -> str:
    return str(n) if n <= 12 else "13+"


_LENGTHS = ((1, "1"), (2, "2"), (3, "3"), (5, "5"), (8, "8"), (12, "12"))


def _length(n: int) -> str:
    return next((name for top, name in _LENGTHS if n <= top), "more")


# closed word classes: how a last word leaves a sentence (open after "the", "to", "and", "i")
_CLASS_WORDS = """
det: a an the this that these those my your his her our their its some any each every no
prep: to of in on at for from with by about into over under after before between through
prep: during without than as
conj: and or but so because if when while although though unless until since nor then
subj: i you he she we they im id ill ive youre theyre theres whats lets thats hes shes
aux: is are was were be been being am do does did have has had can could would will should
aux: might must shall may dont cant wont didnt isnt
wh: what where who whom whose why how which
fill: um uh er erm hmm mm like well
"""


def _classes() -> tuple[tuple[str, frozenset[str]], ...]:
    table: dict[str, set[str]] = {}
    for line in _CLASS_WORDS.strip().splitlines():
        name, _, ws = line.partition(":")
        table.setdefault(name, set()).update(ws.split())
    return (*((k, frozenset(v)) for k, v in table.items()), ("digit", DIGITS))


_CLASSES = _classes()


def word_class(w: str) -> str:
    return next((name for name, ws in _CLASSES if w in ws), "w")


def feature_names(tokens: Sequence[str], kind: str) -> list[str]:
    """The named features of non-empty `tokens` after a question of `kind`: how the words end
    (a whole-text feature such as the first word is shared by an utterance and all its
    prefixes, so it says little; the last words and their classes say most)."""
    last, n = tokens[-1], len(tokens)
    digits = 0
    for w in reversed(tokens):
        if w not in DIGITS:
            break
        digits += 1
    td, ln = _bucket(digits), _length(n)
    cls = [word_class(w) for w in tokens[-3:]]
    names = ["bias", f"L1:{last}", f"L2:{' '.join(tokens[-2:])}", f"L3:{' '.join(tokens[-3:])}"]
    c1, c2, c3 = cls[-1], " ".join(cls[-2:]), " ".join(cls)
    names += [f"sfx:{last[-3:]}", f"n:{ln}", f"td:{td}", f"C1:{c1}", f"C2:{c2}", f"C3:{c3}"]
    names += [f"C1n:{c1}|{ln}", f"F1:{tokens[0]}|C1:{c1}"]
    names += [f"q:{kind}", f"q:{kind}|td:{td}", f"q:{kind}|L1:{last}", f"q:{kind}|n:{ln}"]
    names += [f"q:{kind}|C2:{c2}"]
    return names


def hashed(names: Sequence[str]) -> np.ndarray:
    return np.fromiter((zlib.crc32(s.encode()) & _MASK for s in names), np.int64, len(names))


def word_hash(word: str) -> int:
    return zlib.crc32(word.encode())


def _known(w: str, vocab: frozenset[int]) -> bool:
    """In the vocabulary as it is, or without a plural or possessive "s" ("dashwoods")."""
    return word_hash(w) in vocab or (w.endswith("s") and word_hash(w[:-1]) in vocab)


@dataclass(frozen=True)
class TextEou:
    """The loaded model: `weights` over the hashed buckets and the vocabulary's word hashes."""

    weights: np.ndarray
    vocab: frozenset[int]

    def english(self, text: str, tokens: Sequence[str]) -> bool:
        letters = [ch for ch in text if ch.isalpha()]
        if letters and sum(not ch.isascii() for ch in letters) > MAX_FOREIGN * len(letters):
            return False
        alpha = [w for w in tokens if w not in DIGITS]
        known = sum(_known(w, self.vocab) for w in alpha)
        return not alpha or known >= MIN_KNOWN * len(alpha)

    def p_complete(self, text: str, question: str | None = None) -> float | None:
        if not text.strip() or looks_looped(text):
            return None
        tokens = words(text)
        if not tokens or not self.english(text, tokens):
            return None
        z = float(self.weights[hashed(feature_names(tokens, question_kind(question)))].sum())
        return 1.0 / (1.0 + math.exp(-z))


_lock = threading.Lock()
_model: TextEou | None = None


def read(path: Path) -> TextEou:
    with np.load(path) as f:
        return TextEou(f["weights"].astype(np.float64), frozenset(int(h) for h in f["vocab"]))


def load() -> TextEou:
    """The shipped model, read once on first use (thread-safe)."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                _model = read(WEIGHTS)
    return _model


def p_complete(text: str, question: str | None = None) -> float | None:
    """P(the words so far are a whole utterance), or None when the text cannot tell."""
    return load().p_complete(text, question)
