"""A call's own turn-taking options (`session.start`, a Twilio call's stream parameters, as
strings) over the gateway's `TurnConfig`, and whether the call's echo is cancelled (the VAD
hears the echo-cancelled frame). A bad option is a complaint (sent as an `invalid_option`
error event); the call keeps that option's default and the other options it asked for."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from voice_gateway.turns.config import KNOWN_TURN_DETECTION, TurnConfig, field_of

EchoDefault = Literal["auto", "on", "off"]  # VG_ECHO_CANCELLATION; auto: on for phone calls

# a call's option -> the TurnConfig field it sets (its bounds are that field's)
CALL_OPTIONS = {f.metadata["option"]: f.name for f in fields(TurnConfig) if f.metadata["option"]}


@dataclass(frozen=True, slots=True)
class TurnOptions:
    config: TurnConfig
    echo: bool  # echo cancellation on this call


def turn_options(
    base: TurnConfig, echo_default: EchoDefault, source: str, extra: dict[str, Any]
) -> tuple[TurnOptions, list[str]]:
    """The call's options over the gateway's (`base`, `echo_default`), and the complaints to
    send as error events."""
    errors: list[str] = []
    asked: dict[str, Any] = {}

    def take(option: str) -> None:
        if (raw := extra.get(option)) is None:
            return
        value, problem = _parse(option, CALL_OPTIONS[option], raw)
        if problem:
            errors.append(problem)
        else:
            asked[CALL_OPTIONS[option]] = value

    take("turn_detection")
    echo = echo_default == "on" or (echo_default == "auto" and source == "phone")
    raw = extra.get("echo_cancellation")
    if raw is not None:
        if isinstance(raw, bool):
            echo = raw
        elif isinstance(raw, str) and raw.lower() in ("true", "false"):
            echo = raw.lower() == "true"
        else:
            errors.append("echo_cancellation must be true or false")
    for option in CALL_OPTIONS:
        if option != "turn_detection":
            take(option)
    config = replace(base, **asked)
    return TurnOptions(config, echo), errors


def _parse(option: str, name: str, raw: Any) -> tuple[Any, str]:
    """`raw` as the value of TurnConfig field `name`, or the complaint."""
    if name == "detection":
        if raw in KNOWN_TURN_DETECTION:
            return str(raw), ""
        return None, f"{option} must be one of {', '.join(KNOWN_TURN_DETECTION)}"
    low, high = field_of(name).metadata["low"], field_of(name).metadata["high"]
    value = _whole_ms(raw)
    if value is None or not low <= value <= high:
        return None, f"{option} must be a whole number of milliseconds, {low} to {high}"
    return value, ""


def _whole_ms(raw: Any) -> int | None:
    """An int (JSON) or its digits (a Twilio parameter is a string); None for anything else
    (true, 1.5, "fast")."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        return int(raw.strip())
    return None
