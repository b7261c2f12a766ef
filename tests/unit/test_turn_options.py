"""The call's turn-taking options (turns/options.py `turn_options`): the `auto` defaults by
kind of call (echo cancellation on phone calls, not elsewhere; `auto` on every call), what the
gateway's settings force, and session.start / Twilio stream parameters over both."""

from __future__ import annotations

from typing import Any

import pytest

from voice_gateway.settings import Settings
from voice_gateway.voice import voice_config


def options(source: str, extra: dict[str, Any] | None = None, **settings: Any) -> Any:
    values = {"database_url": "sqlite+aiosqlite:///:memory:", **settings}
    return voice_config(Settings(**values)).turn_options(source, extra or {})


def waits(got: Any) -> tuple[str, int, int]:
    """The call's policy and its two waits."""
    return got.config.detection, got.config.silence_ms, got.config.max_silence_ms


def test_the_default_is_auto_with_echo_cancellation_on_phone_calls() -> None:
    assert Settings(database_url="sqlite+aiosqlite:///:memory:").turn_detection == "auto"
    phone, errors = options("phone")
    assert (phone.config.detection, phone.echo, errors) == ("auto", True, [])
    browser, errors = options("voice")
    assert (browser.config.detection, browser.echo, errors) == ("auto", False, [])


@pytest.mark.parametrize("forced", ["vad", "smart", "auto"])
def test_the_setting_forces_one_policy_on_every_call(forced: str) -> None:
    for source in ("phone", "voice"):
        got, _ = options(source, turn_detection=forced)
        assert got.config.detection == forced


def test_the_call_asks_over_the_default() -> None:
    # a Twilio stream parameter (a string) or session.start
    got, errors = options("phone", {"turn_detection": "vad", "echo_cancellation": "false"})
    assert (got.config.detection, got.echo, errors) == ("vad", False, [])
    got, errors = options("voice", {"turn_detection": "smart"})
    assert (got.config.detection, errors) == ("smart", [])
    got, errors = options("voice", {"turn_detection": "auto"}, turn_detection="vad")
    assert (got.config.detection, errors) == ("auto", [])  # a call may ask for the default policy


def test_a_bad_option_keeps_the_call_s_own_default() -> None:
    got, errors = options("phone", {"turn_detection": "psychic"}, turn_detection="smart")
    assert got.config.detection == "smart"
    assert errors == ["turn_detection must be one of auto, vad, smart, words"]
    got, errors = options("voice", {"turn_detection": "SMART"}, turn_detection="vad")
    assert got.config.detection == "vad" and len(errors) == 1
    got, errors = options("voice", {"turn_detection": True})
    assert got.config.detection == "auto" and len(errors) == 1


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="turn_detection"):
        Settings(database_url="sqlite+aiosqlite:///:memory:", turn_detection="psychic")


def test_a_call_sets_its_own_waits() -> None:
    """session.start sends numbers, a Twilio stream parameter their digits; unset, the
    gateway's VG_ENDPOINT_SILENCE_MS / VG_TURN_MAX_SILENCE_MS."""
    got, errors = options("voice", endpoint_silence_ms=500, turn_max_silence_ms=1800)
    assert (got.config.silence_ms, got.config.max_silence_ms, errors) == (500, 1800, [])
    got, errors = options("voice", {"turn_silence_ms": 250, "turn_max_silence_ms": 900})
    assert (got.config.silence_ms, got.config.max_silence_ms, errors) == (250, 900, [])
    assert (got.config.detection, got.config.silence_ms, got.config.max_silence_ms) == (
        "auto",
        250,
        900,
    )
    got, errors = options("phone", {"turn_silence_ms": " 700 ", "turn_detection": "vad"})
    assert (got.config.detection, got.config.silence_ms, got.config.max_silence_ms, errors) == (
        "vad",
        700,
        1600,
        [],
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("turn_silence_ms", 50),  # under 100: webrtcvad's gaps between words end turns
        ("turn_silence_ms", 2001),
        ("turn_silence_ms", -300),
        ("turn_silence_ms", "-300"),
        ("turn_silence_ms", 2.5),
        ("turn_silence_ms", True),
        ("turn_silence_ms", "fast"),
        ("turn_silence_ms", "\u00b3\u00b3\u00b3"),  # digits to str.isdigit, not to int()
        ("turn_max_silence_ms", 100),
        ("turn_max_silence_ms", 9000),
        ("turn_max_silence_ms", [800]),
    ],
)
def test_a_bad_wait_is_refused_and_the_default_kept(name: str, value: Any) -> None:
    got, errors = options("voice", {name: value, "turn_detection": "smart"})
    assert (got.config.detection, got.config.silence_ms, got.config.max_silence_ms) == (
        "smart",
        400,
        1600,
    )
    low, high = (100, 2000) if name == "turn_silence_ms" else (200, 5000)
    assert errors == [f"{name} must be a whole number of milliseconds, {low} to {high}"]


def test_one_bad_option_leaves_the_good_ones() -> None:
    got, errors = options(
        "voice", {"turn_silence_ms": 300, "turn_max_silence_ms": "soon", "echo_cancellation": True}
    )
    assert (got.config.silence_ms, got.config.max_silence_ms, got.echo) == (300, 1600, True)
    assert len(errors) == 1 and errors[0].startswith("turn_max_silence_ms")
