"""turns/text_eou.py: the words' end-of-utterance signal on text it was never trained on (the
held-apart dialogue turns of scripts/train_text_eou.py and the project's real transcripts),
the answer a question asks for, fillers, and text it cannot read. Bounds are the figures
bench/text_eou.py measured, less a margin; its cost is measured there, not here."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from tests.support.text_eou_cases import Case, heldout, real
from voice_gateway.turns import text_eou
from voice_gateway.turns.text_eou import p_complete, question_kind, words

PHONE = "What's your phone number?"


def right(cases: list[Case], complete: bool) -> float:
    ps = [p_complete(c.text, c.question) for c in cases if c.complete is complete]
    told = [p for p in ps if p is not None]
    assert len(told) >= 0.9 * len(ps)
    return sum((p >= 0.5) == complete for p in told) / len(told)


def test_heldout_dialogue_complete_and_prefixes() -> None:
    cases = heldout()
    assert len(cases) > 8000
    assert right(cases, True) >= 0.78  # measured 0.834 (1,202 utterances)
    assert right(cases, False) >= 0.67  # measured 0.722 (7,186 prefixes)


def test_heldout_prefixes_it_is_sure_of_are_prefixes() -> None:
    """P < 0.2 is what a policy may hold a turn on: almost always an unfinished one."""
    told = [(p_complete(c.text, c.question), c.complete) for c in heldout()]
    low = [done for p, done in told if p is not None and p < 0.2]
    assert len(low) > 3000
    assert low.count(False) / len(low) >= 0.96  # measured 0.982


def test_real_transcripts() -> None:
    cases = real()
    if not cases:
        pytest.skip("pocketsphinx-testdata / pyannote.audio not installed")
    assert right(cases, True) >= 0.75  # measured 0.870 (23 utterances)
    assert right(cases, False) >= 0.62  # measured 0.693 (150 prefixes)
    told = [(p_complete(c.text, c.question), c.complete) for c in cases]
    low = [done for p, done in told if p is not None and p < 0.2]
    assert low.count(False) / len(low) >= 0.92  # measured 0.974


def test_a_phone_number_is_done_when_its_digits_are() -> None:
    assert (p_complete("five five five, one two", PHONE) or 1) < 0.3
    assert (p_complete("five five five one two three four", PHONE) or 0) > 0.7
    assert (p_complete("555 123 4567", PHONE) or 0) > 0.7
    assert (p_complete("my number is 555", None) or 1) < 0.3


@pytest.mark.parametrize(
    "text",
    [
        "I'd like to move my appointment to",
        "eggs, milk and",
        "I want to cancel my order um",
        "um",
        "and",
        "so",
        "because",
        "I need to talk to someone about",
    ],
)
def test_run_on_words_and_fillers_are_not_complete(text: str) -> None:
    p = p_complete(text)
    assert p is not None and p < 0.3


@pytest.mark.parametrize(
    ("text", "question"),
    [
        ("Can you confirm the new time please?", None),
        ("eggs, milk and bread", None),
        ("no thanks", None),
        ("hello?", None),
        ("yes", "Is that correct?"),
        ("John Smith", "What's your name?"),
    ],
)
def test_finished_answers_are_complete(text: str, question: str | None) -> None:
    p = p_complete(text, question)
    assert p is not None and p > 0.7


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "...",
        ". . .",
        "wait wait wait wait wait wait wait wait wait wait",
        "xqzt vbnm kjhg",
        "je voudrais changer mon rendez-vous",
        "Ich möchte meinen Termin verschieben",
        "Я хочу перенести встречу",
        "我想改约",
    ],
)
def test_empty_garbage_and_foreign_text_cannot_tell(text: str) -> None:
    assert p_complete(text) is None
    assert p_complete(text, PHONE) is None


def test_case_punctuation_and_digits_are_not_read() -> None:
    """Whisper capitalises and stops cut-off prefixes: the words alone decide."""
    assert p_complete("He might even have been made.") == p_complete("he might even have been made")
    assert words("Call 555-12, OK?") == ["call", "five", "five", "five", "one", "two", "ok"]


def test_question_kinds() -> None:
    assert question_kind(PHONE) == "phone"
    assert question_kind("What's your zip code?") == "zip"
    assert question_kind("Is that correct?") == "yn"
    assert question_kind("How can I help?") == "wh"
    assert question_kind(None) == question_kind("  ") == "none"


def test_read_once_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Path] = []
    real_read = text_eou.read

    def counted(path: Path) -> text_eou.TextEou:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(text_eou, "read", counted)
    monkeypatch.setattr(text_eou, "_model", None)
    seen: list[text_eou.TextEou] = []
    threads = [threading.Thread(target=lambda: seen.append(text_eou.load())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reads == [text_eou.WEIGHTS]
    assert len(seen) == 8 and len({id(m) for m in seen}) == 1
    assert seen[0].weights.shape == (1 << text_eou.BITS,)
    assert np.isfinite(seen[0].weights).all()


def test_shipped_weights_are_small() -> None:
    assert text_eou.WEIGHTS.stat().st_size < 2_000_000
