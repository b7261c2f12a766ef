"""Cron expressions of recurring scheduled messages (voice_gateway/cron.py): the next time an
expression names, and the errors that name what is wrong."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from voice_gateway.cron import Cron, CronError

T = datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC)  # a Wednesday


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("* * * * *", at(2025, 1, 1, 12, 1)),
        ("*/15 * * * *", at(2025, 1, 1, 12, 15)),
        ("0 9 * * MON-FRI", at(2025, 1, 2, 9, 0)),
        ("0 9 * * sat,sun", at(2025, 1, 4, 9, 0)),
        ("0 0 * * 7", at(2025, 1, 5)),  # 7 is Sunday too
        ("0 0 1 1 *", at(2026, 1, 1)),
        ("30 8 1 * *", at(2025, 2, 1, 8, 30)),
        ("0 0 13 * FRI", at(2025, 1, 3)),  # both day fields restricted: either matches
        ("0 0 */2 * FRI", at(2025, 1, 3)),  # `*/2` counts as `*`: Fridays on odd days
        ("0 0 29 2 *", at(2028, 2, 29)),
        ("5-10/5 12 * * *", at(2025, 1, 1, 12, 5)),
        ("45/5 12 * * *", at(2025, 1, 1, 12, 45)),
        ("0 0 1 jan-mar/2 *", at(2025, 3, 1)),
        ("@hourly", at(2025, 1, 1, 13)),
        ("@weekly", at(2025, 1, 5)),
        ("  @DAILY ", at(2025, 1, 2)),
    ],
)
def test_next_time(expression: str, expected: datetime) -> None:
    assert Cron.parse(expression).next_after(T) == expected


def test_next_is_strictly_later_and_runs_on() -> None:
    cron = Cron.parse("0 * * * *")
    first = cron.next_after(at(2025, 12, 31, 23, 0))
    assert first == at(2026, 1, 1, 0, 0)
    assert cron.next_after(first) == at(2026, 1, 1, 1, 0)


def test_seconds_field_only_when_allowed() -> None:
    with pytest.raises(CronError, match="5 fields"):
        Cron.parse("*/2 * * * * *")
    cron = Cron.parse("*/2 * * * * *", seconds=True)
    assert cron.next_after(T) == at(2025, 1, 1, 12, 0, 32)
    assert Cron.parse("* * * * *", seconds=True).next_after(T) == at(2025, 1, 1, 12, 1)


def test_impossible_dates_name_no_time() -> None:
    assert Cron.parse("0 0 30 2 *").next_after(T) is None
    assert Cron.parse("0 0 31 4,6,9,11 *").next_after(T) is None


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("", "empty"),
        ("* * * *", "needs 5 fields"),
        ("* * * * * * *", "needs 5 fields"),
        ("60 * * * *", "minute: '60' is outside 0-59"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month: '0' is outside 1-31"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day of week"),
        ("*/0 * * * *", "step"),
        ("*/x * * * *", "step"),
        ("10-5 * * * *", "runs backwards"),
        ("* * * FOO *", "unknown name 'FOO'"),
        ("a * * * *", "is not a number"),
        ("1,,2 * * * *", "minute"),
        ("-1 * * * *", "minute"),
        ("* * * * MON-", "day of week"),
        ("@every_5m", "unknown macro"),
        ("١ * * * *", "minute"),  # a non-ASCII digit
        ("* " * 120, "longer than"),
    ],
)
def test_errors_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        Cron.parse(expression)
