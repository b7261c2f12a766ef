"""turns/config.py: `TurnConfig` is validated in one place. Every bounded field refuses a value
just outside its range and takes its ends, whether the value comes from a hand-made config,
the gateway's `VG_*` setting (refused at start, naming the setting) or a call's own option (a
complaint; the call keeps the default)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from voice_gateway.settings import Settings
from voice_gateway.turns.config import TurnConfig, field_of
from voice_gateway.turns.options import CALL_OPTIONS
from voice_gateway.voice import voice_config

FIELDS = dataclasses.fields(TurnConfig)
BOUNDED = [f for f in FIELDS if f.metadata["low"] is not None]
SETTINGS = [f for f in FIELDS if f.metadata["setting"]]


def outside(f: dataclasses.Field[Any]) -> tuple[float, float]:
    """The nearest values just outside the field's range."""
    low, high = f.metadata["low"], f.metadata["high"]
    if f.metadata["open"]:
        return low, high  # the ends themselves are out
    step = 1 if isinstance(f.default, int) or f.default is None else 0.5
    return low - step, high + step


def inside(f: dataclasses.Field[Any]) -> tuple[float, float]:
    low, high = f.metadata["low"], f.metadata["high"]
    if f.metadata["open"]:
        return low + 0.01, high - 0.01
    return low, high


def test_every_field_is_documented_and_every_number_bounded() -> None:
    for f in FIELDS:
        assert len(f.metadata["doc"]) > 20, f.name
        if isinstance(f.default, int | float) and not isinstance(f.default, bool):
            assert f.metadata["low"] is not None, f"{f.name} has no bounds"
    assert {f.name for f in BOUNDED} >= {"silence_ms", "max_silence_ms", "fade_db", "threshold"}


@pytest.mark.parametrize("f", BOUNDED, ids=lambda f: f.name)
def test_a_hand_made_config_is_held_to_each_fields_bounds(f: dataclasses.Field[Any]) -> None:
    for bad in outside(f):
        with pytest.raises(ValueError, match=f"^{f.name} must be"):
            TurnConfig(**{f.name: bad})
    for good in inside(f):
        assert getattr(TurnConfig(**{f.name: good}), f.name) == good


def test_a_wrong_type_is_refused() -> None:
    with pytest.raises(ValueError, match="silence_ms must be a number"):
        TurnConfig(silence_ms=True)
    with pytest.raises(ValueError, match="silence_ms must be a whole number"):
        TurnConfig(silence_ms=400.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        TurnConfig().silence_ms = 300  # type: ignore[misc]


@pytest.mark.parametrize("f", [f for f in SETTINGS if f in BOUNDED], ids=lambda f: f.name)
def test_a_setting_is_held_to_the_same_bounds(f: dataclasses.Field[Any]) -> None:
    """The gateway refuses to start (pydantic's error names the setting); the ends are taken
    and reach each call's TurnConfig."""
    name = f.metadata["setting"]
    for bad in outside(f):
        with pytest.raises(ValidationError, match=name):
            Settings(**{name: bad})
    for good in inside(f):
        s = Settings(**{name: good})
        assert getattr(TurnConfig.from_settings(s), f.name) == good


def test_a_setting_out_of_bounds_in_the_environment_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VG_ENDPOINT_SILENCE_MS", "50")  # unbounded before: now 100-2000
    with pytest.raises(ValidationError, match="endpoint_silence_ms"):
        Settings()
    monkeypatch.setenv("VG_ENDPOINT_SILENCE_MS", "2000")
    assert Settings().endpoint_silence_ms == 2000


def test_every_setting_carries_its_fields_default_and_description() -> None:
    for f in SETTINGS:
        setting = Settings.model_fields[f.metadata["setting"]]
        assert setting.default == f.default, f.name
        assert setting.description == f.metadata["doc"], f.name
    assert TurnConfig.from_settings(Settings()) == TurnConfig()


@pytest.mark.parametrize(
    ("option", "name"), [(o, n) for o, n in CALL_OPTIONS.items() if n != "detection"]
)
def test_a_calls_option_is_held_to_the_settings_bounds(option: str, name: str) -> None:
    """A value the setting takes, the call may ask for; one the setting refuses is a complaint
    and the call keeps the gateway's value (its other options still apply)."""
    f = field_of(name)
    low, high = f.metadata["low"], f.metadata["high"]
    s = Settings()
    for good in (low, high):
        got, errors = voice_config(s).turn_options(
            "voice", {option: good, "turn_detection": "smart"}
        )
        assert errors == [] and getattr(got.config, name) == good
        assert (
            getattr(TurnConfig.from_settings(Settings(**{f.metadata["setting"]: good})), name)
            == good
        )
    for bad in outside(f):
        got, errors = voice_config(s).turn_options(
            "voice", {option: bad, "turn_detection": "smart"}
        )
        assert errors == [f"{option} must be a whole number of milliseconds, {low} to {high}"]
        assert getattr(got.config, name) == getattr(TurnConfig.from_settings(s), name)
        assert got.config.detection == "smart"


def test_a_calls_options_start_from_the_gateways_settings() -> None:
    s = Settings(endpoint_silence_ms=700, turn_fade_db=-18.0, turn_detection="vad")
    got, errors = voice_config(s).turn_options("phone", {"turn_max_silence_ms": "900"})
    assert errors == []
    assert (got.config.silence_ms, got.config.max_silence_ms) == (700, 900)
    assert (got.config.fade_db, got.config.detection, got.echo) == (-18.0, "vad", True)


def test_derived_waits() -> None:
    assert TurnConfig(min_silence_ms=300, max_silence_ms=200).longest_ms == 300
    assert TurnConfig().queue_ms == 150.0
    assert TurnConfig(fade_db=0.0).fade is None and TurnConfig().fade == -21.0
    assert TurnConfig(use_text=False).defers_model is False
    assert TurnConfig().deadline_ms == 400
