"""Cron expressions for recurring scheduled messages, in UTC.

The classic five fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
JAN-DEC), day of week (0-7 or SUN-SAT, 0 and 7 both Sunday). Each field is `*`, a number or
name, a range `a-b`, a step `*/n`, `a-b/n` or `a/n`, or a comma-separated list of those. As in
Vixie cron, when both day fields are restricted (neither starts with `*`) a day matches either
one. Macros: @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly. With
`seconds=True` (VG_SCHEDULE_CRON_SECONDS) a sixth, leading field gives the second (0-59).

Parsed here rather than with a library: the subset is small, and the errors name the field."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

MAX_LEN = 200
SEARCH_YEARS = 5  # an expression with no time in this span never fires (e.g. "0 0 30 2 *")
_MONTHS = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
_DAYS = "SUN MON TUE WED THU FRI SAT".split()
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_VALUE = re.compile(r"[0-9]{1,2}|[A-Za-z]{3}")
# (name, lowest, highest, names of the values from `lowest` on)
_SECOND = ("second", 0, 59, ())
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


class CronError(ValueError):
    """A cron expression that cannot be used; the message says what is wrong."""


def _value(text: str, name: str, lo: int, names: Sequence[str]) -> int:
    if not _VALUE.fullmatch(text):
        raise CronError(f"{name}: {text!r} is not a number" + (" or a name" if names else ""))
    if text.isdigit():
        return int(text)
    upper = text.upper()
    if upper not in names:
        raise CronError(f"{name}: unknown name {text!r}")
    return lo + list(names).index(upper)


def _field(text: str, spec: tuple[str, int, int, Sequence[str]]) -> set[int]:
    name, lo, hi, names = spec
    out: set[int] = set()
    for part in text.split(","):
        span, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not step_text.isascii() or int(step_text) < 1:
                raise CronError(f"{name}: the step in {part!r} must be a positive number")
            step = int(step_text)
        if span == "*":
            first, last = lo, hi
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = _value(a, name, lo, names), _value(b, name, lo, names)
        else:
            first = _value(span, name, lo, names)
            last = hi if slash else first
        if not lo <= first <= hi or not lo <= last <= hi:
            raise CronError(f"{name}: {part!r} is outside {lo}-{hi}")
        if first > last:
            raise CronError(f"{name}: the range {span!r} runs backwards")
        out.update(range(first, last + 1, step))
    return out


@dataclass(frozen=True, slots=True)
class Cron:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # the day-of-month field starts with `*`
    any_weekday: bool

    @classmethod
    def parse(cls, expression: str, *, seconds: bool = False) -> Cron:
        text = expression.strip()
        if not text:
            raise CronError("the cron expression is empty")
        if len(text) > MAX_LEN:
            raise CronError(f"the cron expression is longer than {MAX_LEN} characters")
        text = MACROS.get(text.lower(), text)
        if text.startswith("@"):
            raise CronError(f"unknown macro {text!r} (known: {', '.join(MACROS)})")
        parts = text.split()
        want = "5 fields (minute hour day-of-month month day-of-week)"
        if seconds:
            want = "5 or 6 fields ([second] minute hour day-of-month month day-of-week)"
        if len(parts) == 6 and seconds:
            secs, parts = _field(parts[0], _SECOND), parts[1:]
        elif len(parts) == 5:
            secs = {0}
        else:
            raise CronError(f"the cron expression needs {want}, not {len(parts)}")
        minutes, hours, days, months, weekdays = (
            _field(p, spec) for p, spec in zip(parts, _FIELDS, strict=True)
        )
        return cls(
            frozenset(secs),
            frozenset(minutes),
            frozenset(hours),
            frozenset(days),
            frozenset(months),
            frozenset(d % 7 for d in weekdays),
            parts[2].startswith("*"),
            parts[4].startswith("*"),
        )

    def day_matches(self, d: date) -> bool:
        by_date = d.day in self.days
        by_weekday = d.isoweekday() % 7 in self.weekdays
        if self.any_day or self.any_weekday:
            return by_date and by_weekday
        return by_date or by_weekday

    def next_after(self, moment: datetime) -> datetime | None:
        """The first time this expression names strictly after `moment` (UTC), or None when
        there is none within SEARCH_YEARS."""
        t = moment.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
        end = t.year + SEARCH_YEARS
        while t.year <= end:
            if t.month not in self.months:
                year, month = (t.year + 1, 1) if t.month == 12 else (t.year, t.month + 1)
                t = t.replace(year=year, month=month, day=1, hour=0, minute=0, second=0)
            elif not self.day_matches(t.date()):
                t = (t + timedelta(days=1)).replace(hour=0, minute=0, second=0)
            elif t.hour not in self.hours:
                t = (t + timedelta(hours=1)).replace(minute=0, second=0)
            elif t.minute not in self.minutes:
                t = (t + timedelta(minutes=1)).replace(second=0)
            elif t.second not in self.seconds:
                t += timedelta(seconds=1)
            else:
                return t
        return None
