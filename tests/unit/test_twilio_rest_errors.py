"""Twilio's error text reaches logs and API answers with its phone numbers masked."""

from __future__ import annotations

from voice_gateway.callers import masked
from voice_gateway.twilio_rest import without_numbers


def test_numbers_in_twilio_errors_are_masked() -> None:
    text = "The number +15551230000 is unverified. Calls to (555) 123-4567 are not allowed."
    out = without_numbers(text)
    assert "5551230000" not in out and "123-4567" not in out and "1234567" not in out
    assert masked("+15551230000") in out and masked("5551234567") in out
    assert out.startswith("The number caller:") and out.endswith("are not allowed.")


def test_text_without_numbers_is_unchanged() -> None:
    text = "Authentication Error - invalid username (error 20003)"
    assert without_numbers(text) == text
