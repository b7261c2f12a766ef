"""turns/policies.py: what each policy does at a pause, given the pause's verdict so far and
its silence (the verdict is put on the pause as its decision; how the signals make it is
test_end_of_turn*.py's). Defaults: min_silence_ms 200, silence_ms 400, max_silence_ms 1600,
text_wait_ms 400."""

from __future__ import annotations

import pytest

from tests.unit.test_end_of_turn import Scripted
from voice_gateway.turns.config import TurnConfig
from voice_gateway.turns.policies import AutoTurn, SilenceRule, SmartTurn, policy_for
from voice_gateway.turns.policy import EndOfTurn, Pause, Ready, Verdict

DONE = Verdict(True, "model", 0.9)
DOUBT = Verdict(False, "model", 0.1)  # the model's "not done"
UNFADED = Verdict(False, "prosody")  # the voice stopped at full level
RUN_ON = Verdict(False, "text", text="My number is five five five")
SENTENCE = Verdict(True, "text", text="Is it raining?")
NONE = Verdict(None, "fallback", reason="busy")


def at(policy: EndOfTurn, verdict: Verdict, silent_ms: int, **pause: object) -> Verdict | None:
    return policy.at_pause(Pause(silent_ms, decision=Ready(verdict), **pause))  # type: ignore[arg-type]


def policies() -> tuple[SilenceRule, SmartTurn, AutoTurn]:
    config = TurnConfig()
    model = Scripted()
    return SilenceRule(config), SmartTurn(model, config), AutoTurn(model, config)


def test_the_silence_rule_ends_at_its_silence_whatever_was_said() -> None:
    rule, _, _ = policies()
    for verdict in (DONE, DOUBT, RUN_ON, NONE):
        assert at(rule, verdict, 380) is None
        ended = at(rule, verdict, 400)
        assert ended is not None and (ended.complete, ended.source) == (True, "silence")


@pytest.mark.parametrize(
    ("verdict", "smart_ms", "auto_ms"),
    [
        (DONE, 200, 200),  # the model's "done" on a faded voice: at once
        (SENTENCE, 200, 200),  # a finished sentence the policy's wait called done
        (RUN_ON, 1600, 1600),  # words that run on: the longest wait, for both
        (DOUBT, 1600, 400),  # the voice alone says "not done": smart waits, auto does not
        (UNFADED, 1600, 400),
        (NONE, 400, 400),  # no verdict: the silence rule
    ],
)
def test_smart_and_auto_at_a_pause(verdict: Verdict, smart_ms: int, auto_ms: int) -> None:
    _, smart, auto = policies()
    for policy, end_ms in ((smart, smart_ms), (auto, auto_ms)):
        assert at(policy, verdict, 180) is None  # before min_silence_ms nothing is judged
        if end_ms > 200:
            assert at(policy, verdict, end_ms - 20) is None, (policy.name, verdict)
        ended = at(policy, verdict, end_ms)
        assert ended is not None, (policy.name, verdict, end_ms)


def test_auto_says_the_silence_rule_ended_a_doubtful_voice() -> None:
    _, _, auto = policies()
    ended = at(auto, DOUBT, 400)
    assert ended is not None and (ended.complete, ended.source) == (True, "silence")
    assert ended.probability == pytest.approx(0.1)  # the model's score is kept for metrics
    ended = at(auto, RUN_ON, 1600)
    assert ended is not None and (ended.complete, ended.source) == (False, "text")


def test_auto_waits_for_words_on_their_way_then_the_silence_rule() -> None:
    """A doubtful voice at 400 ms with its transcript still being decoded: the words may hold
    the turn (the reply waits for them anyway), up to min_silence_ms + text_wait_ms."""
    _, _, auto = policies()
    assert at(auto, DOUBT, 400, text_expected=True) is None
    assert at(auto, DOUBT, 580, text_expected=True) is None
    ended = at(auto, DOUBT, 600, text_expected=True)
    assert ended is not None and ended.source == "silence"
    came = at(auto, DOUBT, 400, text_expected=True, text="Okay")
    assert came is not None and came.source == "silence"


def test_the_waits_are_the_configs() -> None:
    config = TurnConfig(silence_ms=300, max_silence_ms=900, min_silence_ms=150)
    model = Scripted()
    smart, auto = SmartTurn(model, config), AutoTurn(model, config)
    assert at(smart, DOUBT, 880) is None and at(smart, DOUBT, 900) is not None
    assert at(auto, DOUBT, 280) is None and at(auto, DOUBT, 300) is not None
    assert at(auto, DONE, 140) is None and at(auto, DONE, 150) is not None
    assert at(SilenceRule(config), NONE, 300) is not None
    assert (smart.first_ms, smart.max_silence_ms, SilenceRule(config).first_ms) == (150, 900, 300)


def test_the_sentence_wait_of_each_policy() -> None:
    model = Scripted()
    assert (
        SmartTurn(model, TurnConfig()).sentence_ms,
        AutoTurn(model, TurnConfig()).sentence_ms,
    ) == (
        0,
        340,
    )
    config = TurnConfig(sentence_ms=900)
    assert SmartTurn(model, config).sentence_ms == AutoTurn(model, config).sentence_ms == 900
    config = TurnConfig(sentence_ms=0, auto_sentence_ms=500)
    assert AutoTurn(model, config).sentence_ms == 0
    assert AutoTurn(model, TurnConfig(auto_sentence_ms=500)).sentence_ms == 500


def test_each_detection_is_its_class() -> None:
    model = Scripted()
    for detection, cls in (("vad", SilenceRule), ("smart", SmartTurn), ("auto", AutoTurn)):
        policy = policy_for(TurnConfig(detection=detection), model)
        assert type(policy) is cls and policy.name == detection
    # without the model file, smart and auto are the silence rule
    assert type(policy_for(TurnConfig(detection="auto"), None)) is SilenceRule
