"""A text signal of completeness, from the speculative transcript at a pause (rules measured
in bench/turn_taking.py on the LibriVox and card-game clips of pocketsphinx-testdata).

`text_complete(text)`: False when the words clearly run on (a trailing conjunction,
preposition, article, possessive or auxiliary, or a trailing group of digits after "number"),
True when they end a sentence, None when the text says nothing either way."""

from __future__ import annotations

import re

RUN_ON = frozenset(
    """a an the and or but so because if that which who whose when where while to of in on at
    for from with by as than then into about like my your his her our their its is are was were
    be been am i'm i'd i'll we you he she they it's there's what's let's um uh er
    could would should can will shall might must do does did have has had not no very more
    most some any each every this these those""".split()
)
DIGITS = frozenset("zero oh one two three four five six seven eight nine".split())
_WORD = re.compile(r"[a-z0-9']+")
_TRAIL_OFF = ("...", "…", ",", "-", ":", ";")


def text_complete(text: str) -> bool | None:
    raw = text.strip().lower()
    if not raw:
        return None
    if raw.endswith(_TRAIL_OFF):
        return False
    words = _WORD.findall(raw)
    if not words:
        return None
    last = words[-1]
    if last in RUN_ON:
        return False
    tail = 0  # the trailing run of digits (spoken or written)
    for w in reversed(words):
        if w in DIGITS:
            tail += 1
        elif w.isdigit():
            tail += len(w)
        else:
            break
    if tail and tail < 7 and any(w in ("number", "phone", "code", "card", "is") for w in words):
        return False
    return True if raw[-1] in ".?!" else None
