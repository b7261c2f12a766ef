"""A text signal of completeness, from the speculative transcript at a pause (rules measured
in bench/turn_taking.py on the LibriVox and card-game clips of pocketsphinx-testdata).

`text_complete(text)`: False when the words clearly run on (a trailing conjunction,
preposition, article, possessive or auxiliary, or a trailing group of digits after "number"),
True when they end a sentence, None when the text says nothing either way.

Lower case with no full stop is not read as running on (it was until stop 40): tiny.en writes
finished short commands that way ("go forward 10 meters", "clubs"), and on
bench/turn_taking.py's corpus that reading prevented no cut-off and held finished commands the
full 1.6 s (the fragment it was meant for, "he might even have", the model scores 0.01, so the
audio holds it)."""

from __future__ import annotations

import re

from voice_gateway.stt.base import DIGITS, looks_looped

RUN_ON = frozenset(
    """a an the and or but so because if that which who whose when where while to of in on at
    for from with by as than then into about like my your his her our their its i'm i'd i'll
    we're you're they're it's there's what's let's um uh er could would should might must
    shall not no very more most some any each every this these those""".split()
)
_WORD = re.compile(r"[a-z0-9']+")
_TRAIL_OFF = ("...", "…", ",", "-", ":", ";")


def text_complete(text: str) -> bool | None:
    """True: a finished sentence; False: the words run on; None: the text cannot tell.
    Whisper's own marks count: a trailing "-" or "..." when a word was cut; a capital and a
    full stop, a sentence; lower case with no full stop says nothing (see above)."""
    raw = text.strip()
    if not raw or looks_looped(raw):
        return None  # (a decoder loop, "wait wait wait ...", says nothing either way)
    if raw.endswith(_TRAIL_OFF):
        return False
    words = _WORD.findall(raw.lower())
    if not words:
        return None
    if words[-1] in RUN_ON:
        return False
    tail = 0  # the trailing run of digits (spoken or written)
    for w in reversed(words):
        if w in DIGITS:
            tail += 1
        elif w.isdigit():
            tail += len(w)
        else:
            break
    if tail and tail < 7 and any(w in ("number", "phone", "code", "card") for w in words):
        return False
    ended = raw[-1] in ".?!"
    return True if ended and raw[0].isupper() else None
