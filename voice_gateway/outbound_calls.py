"""Outbound calls: what may be dialled (E.164, the operator's allowlist), the request body of
`POST /v1/agents/{id}/calls`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from voice_gateway.errors import ApiError

E164 = re.compile(r"^\+[1-9][0-9]{6,14}$")


class PlaceCall(BaseModel):
    """`POST /v1/agents/{id}/calls`. `to` and `from` are E.164 numbers; `caller` is the caller
    key of the person called (default: the `to` number): their memory and conversation."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    to: str = Field(max_length=16)
    from_: str = Field(alias="from", max_length=16)
    caller: str | None = Field(None, max_length=256)
    first_message: str | None = Field(None, min_length=1, max_length=2000)
    machine_detection: Literal["Enable", "DetectMessageEnd"] | None = None
    record: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("to", "from_")
    @classmethod
    def _e164(cls, value: str) -> str:
        if not E164.match(value):
            raise ValueError("must be an E.164 number: '+' and 7 to 15 digits, e.g. +15551230000")
        return value


def allowlist(setting: str | None) -> list[str]:
    return [p.strip() for p in (setting or "").split(",") if p.strip()]


def check_dial_out(to: str, prefixes: list[str]) -> None:
    """403 when an allowlist is set and `to` starts with none of its prefixes."""
    if prefixes and not any(to.startswith(p) for p in prefixes):
        raise ApiError(403, "the number is outside the dial-out allowlist (VG_DIAL_OUT_ALLOWLIST)")
