"""The call's turn-taking options (pipeline/overlap.py `turn_options`): the `auto` defaults by
kind of call (smart turn and echo cancellation on phone calls, neither elsewhere), what the
gateway's settings force, and session.start / Twilio stream parameters over both."""

from __future__ import annotations

from typing import Any

import pytest

from voice_gateway.pipeline.overlap import turn_options
from voice_gateway.settings import Settings


def options(source: str, extra: dict[str, Any] | None = None, **settings: Any) -> Any:
    values = {"database_url": "sqlite+aiosqlite:///:memory:", **settings}
    return turn_options(Settings(**values), source, extra or {})


def test_the_default_is_smart_on_phone_calls_and_vad_elsewhere() -> None:
    assert Settings(database_url="sqlite+aiosqlite:///:memory:").turn_detection == "auto"
    phone, errors = options("phone")
    assert (phone.detection, phone.echo, errors) == ("smart", True, [])
    browser, errors = options("voice")
    assert (browser.detection, browser.echo, errors) == ("vad", False, [])


@pytest.mark.parametrize("forced", ["vad", "smart"])
def test_the_setting_forces_one_policy_on_every_call(forced: str) -> None:
    for source in ("phone", "voice"):
        got, _ = options(source, turn_detection=forced)
        assert got.detection == forced


def test_the_call_asks_over_the_default() -> None:
    # a Twilio stream parameter (a string) or session.start
    got, errors = options("phone", {"turn_detection": "vad", "echo_cancellation": "false"})
    assert (got.detection, got.echo, errors) == ("vad", False, [])
    got, errors = options("voice", {"turn_detection": "smart"})
    assert (got.detection, errors) == ("smart", [])


def test_a_bad_option_keeps_the_call_s_own_default() -> None:
    got, errors = options("phone", {"turn_detection": "psychic"})
    assert got.detection == "smart" and errors == ["turn_detection must be one of vad, smart"]
    got, errors = options("voice", {"turn_detection": "auto"})  # not a call's choice
    assert got.detection == "vad" and len(errors) == 1


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="turn_detection"):
        Settings(database_url="sqlite+aiosqlite:///:memory:", turn_detection="psychic")
