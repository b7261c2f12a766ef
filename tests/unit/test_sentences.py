"""pipeline/sentences.py: streamed LLM deltas cut into speakable sentences."""

from __future__ import annotations

import pytest

from voice_gateway.pipeline.sentences import SentenceSplitter, clean_for_speech, last_sentence


def split(text: str, step: int = 1) -> tuple[list[tuple[int, str]], str | None]:
    """Feed `text` in `step`-character deltas; (position each sentence came out at, sentence)."""
    s = SentenceSplitter()
    out: list[tuple[int, str]] = []
    for i in range(0, len(text), step):
        out += [(i + step, x) for x in s.push(text[i : i + step])]
    return out, s.flush()


def sentences(text: str, step: int = 1) -> list[str]:
    out, rest = split(text, step)
    return [x for _, x in out] + ([rest] if rest else [])


def test_first_sentence_comes_out_while_the_rest_streams() -> None:
    text = "Hello there. How are you today? I am fine!"
    out, rest = split(text)
    # "Hello there." is released as soon as the space after it arrives
    assert out[0] == (len("Hello there. "), "Hello there.")
    assert [x for _, x in out] == ["Hello there.", "How are you today?"]
    assert rest == "I am fine!"


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_same_sentences_for_any_delta_size(step: int) -> None:
    text = "One. Two! Three? Four... Five."
    assert sentences(text, step) == ["One.", "Two!", "Three?", "Four...", "Five."]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dr. Smith paid $3.50 today. Then left.", ["Dr. Smith paid $3.50 today.", "Then left."]),
        ("Version 2.0 is out. Good.", ["Version 2.0 is out.", "Good."]),
        ("J. R. R. Tolkien wrote books. Yes.", ["J. R. R. Tolkien wrote books.", "Yes."]),
        ("Meet me at 5 p.m. tomorrow. Bye.", ["Meet me at 5 p.m. tomorrow.", "Bye."]),
        ("See e.g. the menu. Okay.", ["See e.g. the menu.", "Okay."]),
        ('He said "Hi." Then left.', ['He said "Hi."', "Then left."]),
        ("Wait... what?! Really.", ["Wait...", "what?!", "Really."]),
    ],
)
def test_abbreviations_numbers_and_quotes(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_markdown_is_not_spoken() -> None:
    text = "**Bold** and `code` and a [link](http://x.y).\n\n# Title\n- item one\n- item two"
    assert sentences(text) == ["Bold and code and a link.", "Title", "item one", "item two"]
    assert clean_for_speech("1. first\n2. second") == "first second"


def test_long_first_sentence_is_cut_at_a_clause() -> None:
    text = (
        "Well, here is a rather long first sentence that goes on and on, and then some more "
        "words follow here. Second sentence, with a comma, stays whole."
    )
    got = sentences(text)
    assert got[0] == "Well, here is a rather long first sentence that goes on and on,"
    assert got[1] == "and then some more words follow here."
    assert got[2] == "Second sentence, with a comma, stays whole."  # only the first is cut


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_first_sentence_is_cut_at_its_first_clause_past_a_few_words(step: int) -> None:
    text = "Sure, I can check that for you, and the library opens at nine. Bye, then, okay."
    assert sentences(text, step) == [
        "Sure, I can check that for you,",  # "Sure," alone is too short a chunk
        "and the library opens at nine.",
        "Bye, then, okay.",  # only the first sentence is cut
    ]
    assert sentences("Sure, no problem. Ok.", step) == ["Sure, no problem.", "Ok."]
    assert sentences("It costs 1,250 dollars in total.", step) == [
        "It costs 1,250 dollars in total."
    ]


def test_first_clause_comes_out_before_the_sentence_ends() -> None:
    out, _rest = split("Yes, the shop is open, until six tonight.")
    assert out[0] == (len("Yes, the shop is open, "), "Yes, the shop is open,")
    s = SentenceSplitter(first_clause_words=0)
    assert s.push("Yes, the shop is open, until six tonight. ") == [
        "Yes, the shop is open, until six tonight."
    ]


def test_no_sentence_without_the_following_space_and_flush_keeps_the_tail() -> None:
    s = SentenceSplitter()
    assert s.push("Almost done.") == []  # might still become "Almost done.5"
    assert s.push(" ") == ["Almost done."]
    assert s.push("tail without end") == []
    assert s.flush() == "tail without end"
    assert s.flush() is None
    assert SentenceSplitter().push(". ") == []  # punctuation alone is not a sentence


def test_last_sentence_is_what_the_callers_next_words_answer() -> None:
    assert last_sentence("Sure. What is your phone number?") == "What is your phone number?"
    assert last_sentence("Dr. Smith is in. Anything else?") == "Anything else?"
    assert last_sentence("Hello there. I can help") == "I can help"  # cut off mid-sentence
    assert last_sentence("") is None
