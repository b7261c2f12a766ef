"""`words` (WordsTurn): `auto` with the words read by the text classifier at a pause. Clearly
unfinished words hold the turn to the max silence whatever the voice says; finished words on a
faded voice end it at once; doubt (and no reading: no transcript, empty, garbage, not English)
is `auto`'s turn end exactly. The detector timeline of
test_end_of_turn_auto.py (the test's voice fades by 14 dB: `turn_fade_db=-14` is "faded")."""

from __future__ import annotations

import pytest

from tests.unit.test_end_of_turn import Scripted
from tests.unit.test_end_of_turn_auto import detector
from tests.unit.test_end_of_turn_text_wait import pause_then_text
from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.text_eou import p_complete
from voice_gateway.turns.transcript import text_complete
from voice_gateway.turns.words import WordsSignal
from voice_gateway.voice import voice_config


def test_unfinished_words_hold_the_turn_whatever_the_voice_says() -> None:
    """ "my name is": the transcript rule cannot tell (no run-on word), the classifier can
    (P < 0.2). The model says done on a faded voice: `auto` ends at 200 ms, `words` waits its
    1000 ms maximum."""
    text = "my name is"
    assert text_complete(text) is None and (p_complete(text) or 1.0) < 0.2
    stop = pause_then_text(detector("auto", Scripted(0.95), turn_fade_db=-14.0), text, at=6)
    assert stop.end_of_turn_ms <= 260
    stop = pause_then_text(detector("words", Scripted(0.95), turn_fade_db=-14.0), text, at=6)
    assert stop.end_of_turn_ms == 1000 and stop.verdict is not None


def test_finished_words_on_a_faded_voice_end_the_turn_at_once() -> None:
    """ "thank you very much": no full stop, so the transcript rule cannot tell; the model
    scores the voice 0.1. `auto` ends at the silence rule's 400 ms, `words` when the words
    come (frame 6 of the silence: ~200 ms, the decision's first frame)."""
    text = "thank you very much"
    assert text_complete(text) is None and (p_complete(text) or 0.0) >= 0.8
    stop = pause_then_text(detector("auto", Scripted(0.1), turn_fade_db=-14.0), text, at=6)
    assert stop.end_of_turn_ms == 400
    stop = pause_then_text(detector("words", Scripted(0.1), turn_fade_db=-14.0), text, at=6)
    assert stop.end_of_turn_ms <= 260 and stop.verdict is not None
    assert (stop.verdict.complete, stop.verdict.source) == (True, "text")


def test_finished_words_on_a_voice_that_did_not_fade_wait_for_the_silence_rule() -> None:
    """Doubt: the words read complete but the voice stopped at full level (default -21 dB not
    reached): `auto`'s silence rule, 400 ms."""
    stop = pause_then_text(detector("words", Scripted(0.1)), "thank you very much", at=6)
    assert stop.end_of_turn_ms == 400 and stop.verdict is not None
    assert stop.verdict.source == "silence"


@pytest.mark.parametrize(
    "text", [None, "", "...", "asdf qwer zxcv", "je voudrais changer mon rendez-vous"]
)
@pytest.mark.parametrize("p", [0.1, 0.95])
def test_without_a_reading_the_turn_ends_as_auto_ends_it(text: str | None, p: float) -> None:
    """No transcript, an empty or garbage one, or not English (the classifier cannot tell):
    the audio and silence rules decide, at the same silence and with the same verdict."""
    assert text is None or p_complete(text) is None
    ends = []
    for policy in ("auto", "words"):
        det = detector(policy, Scripted(p), turn_fade_db=-14.0)
        stop = pause_then_text(det, text, at=6, expect=text is not None)
        assert stop.verdict is not None
        ends.append((stop.end_of_turn_ms // 20, stop.verdict.complete, stop.verdict.source))
    assert ends[0] == ends[1]


def test_the_agents_last_question_changes_what_a_complete_answer_is() -> None:
    """ "five five five one two" reads complete alone, unfinished after "What's your phone
    number?": the detector's `question` reaches each pause."""
    text, question = "five five five one two", "What's your phone number?"
    det = detector("words", Scripted(0.95), turn_fade_db=-14.0)
    assert pause_then_text(det, text, at=6).end_of_turn_ms <= 260
    det = detector("words", Scripted(0.95), turn_fade_db=-14.0)
    det.question = question
    assert (p_complete(text, question) or 1.0) < 0.2
    assert pause_then_text(det, text, at=6).end_of_turn_ms == 1000


def test_the_bands_are_turn_config_fields_with_bounds() -> None:
    signal = WordsSignal(TurnConfig(words_hold_below=0.1, words_done_from=0.9))
    assert [signal.band(p) for p in (None, 0.05, 0.1, 0.5, 0.9)] == [None, False, None, None, True]
    with pytest.raises(ValueError, match="words_hold_below"):
        TurnConfig(words_hold_below=1.5)
    with pytest.raises(ValueError, match="words_done_from"):
        TurnConfig(words_done_from=-0.1)
    crossed = WordsSignal(TurnConfig(words_hold_below=0.6, words_done_from=0.4))
    assert [crossed.band(p) for p in (0.5, 0.6)] == [False, True]  # done never under hold


def test_words_is_asked_for_by_name_and_auto_stays_the_default() -> None:
    s = Settings(database_url="sqlite+aiosqlite:///:memory:")
    assert s.turn_detection == "auto" and TurnConfig().detection == "auto"
    got, errors = voice_config(s).turn_options("voice", {"turn_detection": "words"})
    assert (got.config.detection, errors) == ("words", [])
