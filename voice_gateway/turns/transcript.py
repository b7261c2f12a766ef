"""The transcript signal of end of turn: what the words of the speculative transcript at a
pause say (rules measured in bench/turn_taking.py on the LibriVox and card-game clips of
pocketsphinx-testdata), and what a decoder loop looks like (`looks_looped`: such text says
nothing here, and local whisper decodes it again, voice_gateway/stt/whisper.py).

`text_complete(text)`: False when the words clearly run on (a trailing conjunction,
preposition, article, possessive or auxiliary, or a trailing group of digits after "number"),
True when they end a sentence, None when the text says nothing either way.

Lower case with no full stop is not read as running on: tiny.en writes
finished short commands that way ("go forward 10 meters", "clubs"), and on
bench/turn_taking.py's corpus that reading prevented no cut-off and held finished commands the
full 1.6 s (the fragment it was meant for, "he might even have", the model scores 0.01, so the
audio holds it)."""

from __future__ import annotations

import re
import zlib

MAX_COMPRESSION = 2.4  # faster-whisper's own threshold for "the decoder is looping"
DIGITS = frozenset("zero oh one two three four five six seven eight nine".split())  # spoken
_WORD = re.compile(r"[a-z0-9']+")


def looks_looped(text: str) -> bool:
    """A transcript like a decoder loop: no word at all ("." / ". . ."), text that compresses
    like one ("wait wait wait ...", whisper on speech cut mid-word), or a phrase said again at
    once, too short for the compression to tell ("10 of clubs 10 of clubs 10 of clubs 10 of":
    tiny.en on "ten of clubs" with 80 ms of silence after it; see `repeated`)."""
    if not text:
        return False
    if not any(ch.isalnum() for ch in text):
        return True
    raw = text.encode()
    return len(raw) / len(zlib.compress(raw)) > MAX_COMPRESSION or repeated(text)


def repeated(text: str, longest: int = 8) -> bool:
    """A run of words, not all digits, said again at once: 3 or more words twice, 2 words three
    times ("10 of clubs 10 of clubs": tiny.en doubling "ten of clubs"). Speech does that too
    ("in the box, in the box"), and then costs one more decode, never the words. One word
    repeated ("no no no") and digit groups ("five five five", "555-555") are not counted."""
    words = _WORD.findall(text.lower())
    for k in range(2, longest + 1):
        times = 3 if k == 2 else 2
        for i in range(len(words) - times * k + 1):
            phrase = words[i : i + k]
            if all(w.isdigit() or w in DIGITS or w == "ten" for w in phrase):
                continue
            if all(words[i + j * k : i + (j + 1) * k] == phrase for j in range(1, times)):
                return True
    return False


RUN_ON = frozenset(
    """a an the and or but so because if that which who whose when where while to of in on at
    for from with by as than then into about like my your his her our their its i'm i'd i'll
    we're you're they're it's there's what's let's um uh er could would should might must
    shall not no very more most some any each every this these those""".split()
)
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
