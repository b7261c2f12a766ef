"""Train the text end-of-utterance classifier (voice_gateway/turns/text_eou.py) and write its
weights, voice_gateway/turns/text_eou.npz, and the held-apart dialogue turns the tests and
bench/text_eou.py read, tests/support/text_eou_heldout.tsv (about 3 minutes on 2 cores).

    PYTHONPATH=. python scripts/train_text_eou.py [--wheels DIR] [--check]

Data, two PyPI wheels fetched with `pip download --no-deps` (or copies in `--wheels DIR`) and
checked against their sha256:
- chatterbot-corpus 1.3.3 (BSD-3-Clause): its English dialogues, every turn.
- chitchat-dataset 0.9.0 (MIT): people's chit-chat by text; 30,000 turns of at most 40 words
  drawn at random (a turn: one person's run of messages, each message a sentence).
One conversation in five is held apart (by a hash of its key) and never trained on; the
project's real transcripts (tests/support/real_speech.py) are not read here at all.
Examples: each utterance is complete (after the one before it when that is a question); each
prefix of it cut at a word boundary inside a sentence is not (at a sentence's end it is);
fillers appended ("um", "and", "so") make either unfinished; a filler in front changes
nothing. Generated phone-call answers add numbers by digit count, dates, times, names, lists
and yes/no answers with and without their question. Fixed seed, full-batch Adam in numpy
(150 steps, L2 3e-5, chosen on a validation fifth of the training conversations): the same
weights, bit for bit, on the same machine; `--check` compares a fresh run with the shipped
file.

The vocabulary that tells English text from other text (text_eou.TextEou.english) is the
training words and the SCOWL word list of Debian's wamerican (/usr/share/dict/american-english,
`apt-get install wamerican`; permissive licence, voice_gateway/turns/text_eou_NOTICE.txt),
stored as crc32 hashes."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import random
import subprocess
import sys
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from tests.support.text_eou_cases import prefixes
from voice_gateway.turns import text_eou
from voice_gateway.turns.text_eou import feature_names, hashed, question_kind, word_hash, words

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ROOT / "tests" / "support" / "text_eou_heldout.tsv"
DICT = Path("/usr/share/dict/american-english")
CHITCHAT_TURNS, HELD_CHITCHAT, MAX_WORDS = 30000, 400, 40
SEED = 20261206
EPOCHS, LR, L2 = 150, 0.05, 3e-5
FILLERS_END = ("um", "uh", "and", "so", "but", "and um", "because", "like", "or", "you know")
FILLERS_START = ("um", "uh", "so", "well", "yeah", "okay", "oh")


@dataclass(frozen=True)
class Example:
    text: str
    question: str | None
    complete: bool
    generated: bool = False


@dataclass(frozen=True)
class Wheel:
    spec: str
    file: str
    sha256: str


CHATTERBOT = Wheel(
    "chatterbot-corpus==1.3.3",
    "chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
    "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154",
)
CHITCHAT = Wheel(
    "chitchat-dataset==0.9.0",
    "chitchat_dataset-0.9.0-py3-none-any.whl",
    "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e",
)


def fetch(wheel: Wheel, folder: Path | None) -> bytes:
    """The wheel's bytes: from `folder` when it has it, else `pip download --no-deps`."""
    if folder is not None and (folder / wheel.file).is_file():
        data = (folder / wheel.file).read_bytes()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp]
            subprocess.run([*pip, wheel.spec], check=True)
            data = (Path(tmp) / wheel.file).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != wheel.sha256:
        sys.exit(f"{wheel.spec}: sha256 {digest}, expected {wheel.sha256}")
    return data


def chitchat(wheel: bytes) -> list[tuple[str, list[str]]]:
    """(key, turns) of every chitchat conversation: a turn is one sender's run of messages,
    joined as sentences (a message ends a thought the way a sentence does)."""
    with zipfile.ZipFile(io.BytesIO(wheel)) as z:
        doc = json.loads(z.read("chitchat_dataset/dataset.json"))
    out: list[tuple[str, list[str]]] = []
    for key in sorted(doc):
        turns = []
        for messages in doc[key]["messages"]:
            said = [" ".join(str(m["text"]).split()) for m in messages]
            said = [t if t[-1] in ".?!" else f"{t}." for t in said if t]
            if said:
                turns.append(" ".join(said))
        out.append((f"chitchat:{key}", turns))
    return out


def conversations(wheel: bytes) -> list[tuple[str, list[str]]]:
    """(key, utterances) of every English conversation, in the wheel's file order."""
    out: list[tuple[str, list[str]]] = []
    with zipfile.ZipFile(io.BytesIO(wheel)) as z:
        names = sorted(n for n in z.namelist() if "/data/english/" in n and n.endswith(".yml"))
        for name in names:
            doc = yaml.safe_load(z.read(name).decode())
            for i, conv in enumerate(doc.get("conversations") or []):
                turns = [str(t).strip() for t in conv if str(t).strip()]
                out.append((f"{Path(name).stem}:{i}", turns))
    return out


def held_apart(key: str) -> bool:
    return zlib.crc32(key.encode()) % 5 == 0


def turn_pairs(convs: list[tuple[str, list[str]]]) -> list[tuple[str | None, str]]:
    """(the question before it or None, utterance) of every turn."""
    pairs: list[tuple[str | None, str]] = []
    for _, turns in convs:
        for prev, turn in zip([None, *turns], turns, strict=False):
            pairs.append((prev if prev and prev.rstrip().endswith("?") else None, turn))
    return pairs


def dialogue_examples(pairs: list[tuple[str | None, str]], rng: random.Random) -> list[Example]:
    out: list[Example] = []
    for question, utterance in pairs:
        for text, ends in prefixes(utterance):
            out.append(Example(text, question, ends))
            if rng.random() < 0.15:
                out.append(Example(f"{text} {rng.choice(FILLERS_END)}", question, False))
        if rng.random() < 0.2:
            out.append(Example(f"{rng.choice(FILLERS_START)} {utterance}", question, True))
    return out


def _split(text: str) -> tuple[str, ...]:
    """Phrases one a line."""
    return tuple(line.strip() for line in text.strip().splitlines())


SPOKEN = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "oh")
PHONE_Q = _split("""
    What's your phone number?
    What is the best number to reach you?
    Can I get a callback number?
    What's your account number?
    And your cell number?
""")
ZIP_Q = ("What's your zip code?", "Can I have your postcode?")
CODE_Q = ("What's the verification code?", "Please read me the pin.")
DATE_Q = _split("""
    What date works for you?
    When is your birthday?
    What day would you like to come in?
""")
TIME_Q = ("What time works best?", "When should I call you back?", "What time is good for you?")
NAME_Q = ("What's your name?", "Can I have your full name?", "Could you spell your last name?")
YN_Q = _split("""
    Is that correct?
    Do you want me to book it?
    Would you like anything else?
    Can I help you with anything else?
    Are you still there?
    Shall I confirm?
""")
LIST_Q = ("What would you like to order?", "What do you need from the store?")
WH_Q = ("How can I help you today?", "What can I do for you?", "Why are you calling today?")
NAMES = ("john smith", "maria garcia", "sarah", "david lee", "anna", "michael brown", "jessica")
MONTHS = ("january", "march", "april", "june", "july", "september", "october", "december")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
ORDINALS = ("first", "second", "third", "fifth", "tenth", "twelfth", "twentieth", "thirtieth")
ITEMS = _split("""
    eggs
    milk
    bread
    coffee
    a pizza
    two salads
    some rice
    apples
    a large coke
    chicken
    cheese
    butter
""")
YES = _split("""
    yes
    no
    yeah
    yep
    nope
    sure
    no thanks
    yes please
    that's right
    correct
    that's correct
    okay
    yes that's fine
    no that's all
    sounds good
    perfect
    yes go ahead
    not right now
    i think so
    no i don't think so
""")
GREET = _split("""
    hello?
    hi
    hello
    hey there
    thanks
    thank you
    bye
    goodbye
    that's all
    nothing else
    okay thanks
    great thank you very much
    hi there
""")
REQUESTS = (
    (
        "i'd like to",
        _split("""
        move my appointment to friday
        cancel my order
        book a table for two
        speak to someone about my bill
        change my address
        pay my bill
        order a pizza
    """),
    ),
    (
        "can you",
        _split("""
        confirm the new time please
        check my balance
        call me back tomorrow
        send me the receipt
        tell me when you open
        help me with my account
    """),
    ),
    (
        "i need to",
        _split("""
        reschedule my visit
        reset my password
        talk to a doctor
        report a problem with my internet
        update my card details
    """),
    ),
    (
        "i'm calling about",
        _split("""
        my order
        the invoice i got yesterday
        my appointment next week
        a missing package
    """),
    ),
)
DATES_DONE = ("{day}", "the {o} of {m}", "{d}", "next {d}", "{d} please")
DATES_OPEN = ("{m}", "the {o} of", "next", "on", "{d} or", "maybe")
TIMES_DONE = _split("""
    three thirty
    around noon
    tomorrow at ten
    after five pm
    in the morning
    any time after lunch
    9 am
""")
TIMES_OPEN = ("around", "tomorrow at", "after", "maybe in the", "at", "three or")
YES_OPEN = tuple("yes but|no i|well|um|yes and|no because|actually|hmm let me|yes i".split("|"))
LIST_OPEN = (" and", ",", " and um", " and uh", " or")
FILLERS = ("um", "uh", "so", "and", "well", "because", "like", "you know", "um so")
OPEN_ENDS = ("to", "for", "at", "about", "with", "my", "the", "a", "on", "and", "from", "is")


def _digits(rng: random.Random, n: int) -> str:
    ds = [rng.choice(SPOKEN[:10]) if rng.random() < 0.85 else "oh" for _ in range(n)]
    if rng.random() < 0.3:
        return "".join(str(SPOKEN.index(d) % 10) for d in ds)  # whisper writes digits
    return " ".join(ds)


def _lead(rng: random.Random, *options: str) -> str:
    return rng.choice(("", "", *options))


def generated(rng: random.Random, n: int = 1500) -> list[Example]:
    out: list[Example] = []

    def add(text: str, q: str | None, done: bool) -> None:
        out.append(Example(" ".join(text.split()), q, done, True))
        if q is not None and rng.random() < 0.3:
            out.append(Example(" ".join(text.split()), None, done, True))

    q: str | None
    for _ in range(n):
        q = rng.choice(PHONE_Q)
        lead = _lead(rng, "it's", "my number is", "sure it's", "yeah it's", "um it's")
        k = rng.choice((7, 10, 10, 10, 11))
        add(f"{lead} {_digits(rng, k)}", q, True)
        add(f"{lead} {_digits(rng, rng.choice((1, 2, 3, 3, 4, 5, 6, 8, 9)))}", q, False)
        add(f"my number is {_digits(rng, rng.choice((1, 3, 4, 6)))}", None, False)
        add(f"my number is {_digits(rng, 10)}", None, True)
        if lead:
            add(lead, q, False)
        q = rng.choice(ZIP_Q)
        lead = _lead(rng, "it is", "it's")
        add(f"{lead} {_digits(rng, 5)}", q, True)
        add(f"{lead} {_digits(rng, rng.choice((1, 2, 3, 4)))}", q, False)
        q = rng.choice(CODE_Q)
        add(_digits(rng, 6), q, True)
        add(_digits(rng, rng.choice((1, 2, 3, 4))), q, False)
        q = rng.choice(DATE_Q)
        m, o, d = rng.choice(MONTHS), rng.choice(ORDINALS), rng.choice(DAYS)
        add(rng.choice(DATES_DONE).format(day=f"{m} {o}", m=m, o=o, d=d), q, True)
        add(rng.choice(DATES_OPEN).format(m=m, o=o, d=d), q, False)
        q = rng.choice(TIME_Q)
        add(rng.choice(TIMES_DONE), q, True)
        add(rng.choice(TIMES_OPEN), q, False)
        q = rng.choice(NAME_Q)
        name = rng.choice(NAMES)
        add(rng.choice((name, f"it's {name}", f"my name is {name}")), q, True)
        add(rng.choice(("my name is", "it's", "my first name is", f"{name} and")), q, False)
        q = rng.choice(YN_Q)
        add(rng.choice(YES), q, True)
        add(rng.choice(YES_OPEN), q, False)
        add(rng.choice(GREET), rng.choice((None, None, *WH_Q)), True)
        q = rng.choice(LIST_Q)
        items = rng.sample(ITEMS, rng.choice((2, 3, 4)))
        add(", ".join(items[:-1]) + f" and {items[-1]}", q, True)
        add(", ".join(items[:-1]) + rng.choice(LIST_OPEN), q, False)
        q = rng.choice((None, *WH_Q))
        start, ends = rng.choice(REQUESTS)
        lead = _lead(rng, "um", "yes", "hi", "so")
        whole = f"{lead} {start} {rng.choice(ends)}"
        add(whole, q, True)
        cut = whole.split()
        add(" ".join(cut[: rng.randrange(1, len(cut))]), q, False)
        add(f"{whole} {rng.choice(OPEN_ENDS)}", q, False)
        add(f"{start} {rng.choice(('um', 'uh', ''))}", q, False)
        add(rng.choice(FILLERS), rng.choice((None, *WH_Q, *YN_Q)), False)
    return out


def design(examples: list[Example]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(feature index, its row, labels, sample weights): the two classes weigh the same in
    the dialogue examples and in the generated ones."""
    idx: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    for i, ex in enumerate(examples):
        h = np.unique(hashed(feature_names(words(ex.text), question_kind(ex.question))))
        idx.append(h)
        rows.append(np.full(len(h), i, np.int64))
    y = np.array([ex.complete for ex in examples], np.float64)
    gen = np.array([ex.generated for ex in examples])
    sw = np.zeros(len(y))
    for part in (gen, ~gen):
        for label in (0.0, 1.0):
            cell = part & (y == label)
            sw[cell] = part.sum() / (2 * cell.sum())
    return np.concatenate(idx), np.concatenate(rows), y, sw


def train(examples: list[Example]) -> np.ndarray:
    idx, rows, y, sw = design(examples)
    n, dim = len(y), 1 << text_eou.BITS
    w = np.zeros(dim)
    m, v = np.zeros(dim), np.zeros(dim)
    used = np.zeros(dim, bool)
    used[idx] = True
    for t in range(1, EPOCHS + 1):
        z = np.bincount(rows, weights=w[idx], minlength=n)
        err = (1 / (1 + np.exp(-z)) - y) * sw / n
        g = np.bincount(idx, weights=err[rows], minlength=dim) + L2 * w * used
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w -= LR * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return w.astype(np.float32)


def accuracy(model: text_eou.TextEou, examples: list[Example]) -> dict[str, float]:
    got = [(model.p_complete(ex.text, ex.question), ex.complete) for ex in examples]
    pos = [p >= 0.5 for p, c in got if c and p is not None]
    neg = [p < 0.5 for p, c in got if not c and p is not None]
    return {
        "complete": round(sum(pos) / max(len(pos), 1), 3),
        "prefix": round(sum(neg) / max(len(neg), 1), 3),
        "n": len(got),
        "cannot_tell": sum(p is None for p, _ in got),
    }


def split(
    convs: list[tuple[str, list[str]]], rng: random.Random, most: int | None = None
) -> tuple[list[tuple[str | None, str]], list[tuple[str | None, str]]]:
    """(training turns, held-apart turns): a conversation in five held apart; `most` training
    turns of at most MAX_WORDS words, drawn at random, and as many held-apart ones at most
    (a turn said the same way in training is not held apart)."""
    train_pairs = turn_pairs([c for c in convs if not held_apart(c[0])])
    if most is not None:
        train_pairs = [p for p in train_pairs if len(p[1].split()) <= MAX_WORDS]
        rng.shuffle(train_pairs)
        train_pairs = train_pairs[:most]
    seen = {" ".join(words(u)) for _, u in train_pairs}
    test_pairs = sorted(
        {
            (" ".join((q or "").split()) or None, " ".join(u.split()))
            for q, u in turn_pairs([c for c in convs if held_apart(c[0])])
            if " ".join(words(u)) not in seen and words(u) and len(u.split()) <= MAX_WORDS
        },
        key=lambda p: (p[1], p[0] or ""),
    )
    if most is not None:
        test_pairs = sorted(rng.sample(test_pairs, HELD_CHITCHAT), key=lambda p: (p[1], p[0] or ""))
    return train_pairs, test_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--wheels", type=Path, help="a folder with copies of the two wheels")
    ap.add_argument("--check", action="store_true", help="compare with the shipped weights")
    args = ap.parse_args()
    if not DICT.is_file():
        sys.exit(f"{DICT} not found: apt-get install wamerican")
    rng = random.Random(SEED)
    cb_train, cb_test = split(conversations(fetch(CHATTERBOT, args.wheels)), rng)
    cc_train, cc_test = split(chitchat(fetch(CHITCHAT, args.wheels)), rng, CHITCHAT_TURNS)
    examples = [
        e for e in dialogue_examples(cb_train + cc_train, rng) + generated(rng) if words(e.text)
    ]
    weights = train(examples)
    known = {w for ex in examples for w in words(ex.text)}
    known.update(w for line in DICT.read_text().splitlines() for w in words(line))
    vocab = np.unique(np.array([word_hash(w) for w in known], np.uint32))
    name = "text_eou.check.npz" if args.check else "text_eou.npz"
    out = ROOT / "voice_gateway" / "turns" / name
    np.savez_compressed(out, weights=weights, vocab=vocab)
    model = text_eou.read(out)
    print(f"examples {len(examples)}", file=sys.stderr)
    print(f"train {accuracy(model, examples)}", file=sys.stderr)
    for source, pairs in (("chatterbot", cb_test), ("chitchat", cc_test)):
        held = [Example(t, q, done) for q, u in pairs for t, done in prefixes(u)]
        print(f"held-apart {source} ({len(pairs)} turns) {accuracy(model, held)}", file=sys.stderr)
    if args.check:
        shipped = np.load(text_eou.WEIGHTS)["weights"]
        out.unlink()
        diff = float(np.abs(shipped - weights).max())
        print(f"max weight difference from the shipped file: {diff:.2e}", file=sys.stderr)
        sys.exit(0 if diff < 1e-4 else 1)
    rows = [(s, q, u) for s, ps in (("chatterbot", cb_test), ("chitchat", cc_test)) for q, u in ps]
    HELDOUT.write_text(
        "# source<TAB>question<TAB>utterance: held-apart turns of chatterbot-corpus 1.3.3\n"
        "# (BSD-3-Clause, (c) 2016 Gunther Cox) and chitchat-dataset 0.9.0 (MIT, (c) 2019\n"
        "# Perception, Control and Cognition Lab), never trained on\n"
        + "".join(
            f"{s}\t{(q or '').replace(chr(9), ' ')}\t{u.replace(chr(9), ' ')}\n" for s, q, u in rows
        )
    )


if __name__ == "__main__":
    main()
