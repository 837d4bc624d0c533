"""Five-field cron expressions (minute hour day-of-month month day-of-week),
as crontab(5) reads them, in UTC: `*`, numbers, ranges `a-b`, steps `*/n`
and `a-b/n`, lists `a,b`, month and day names (jan, mon), 0 or 7 for
Sunday; when both day fields are restricted, a day matching either runs.
Pure: no I/O, no clock."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.services.errors import Invalid

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names for lowest..)
FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of month", 1, 31, ()),
          ("month", 1, 12, MONTHS), ("day of week", 0, 7, DAYS))
PART = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(\d+))?$")
# Far enough for 29 February of any leap year, and every weekday with it.
SEARCH_DAYS = 8 * 366


class CronError(Invalid):
    """An expression cron would not accept; the message says which field."""

    def __init__(self, message: str):
        super().__init__(f"cron: {message}")


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]       # 0 = Sunday
    # A day field starting with * (as cron reads it) leaves the choice of
    # days to the other one; two restricted fields match either.
    any_day: bool
    any_weekday: bool

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, moment: datetime) -> datetime:
        """The first minute strictly after `moment` that matches."""
        start = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        for _ in range(SEARCH_DAYS):
            if self._day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        candidate = day.replace(hour=hour, minute=minute)
                        if candidate >= start:
                            return candidate
            day += timedelta(days=1)
        raise CronError(f"{self.text!r} never matches a real date")


def _value(token: str, low: int, names: tuple[str, ...], field: str) -> int:
    if token.isdigit():
        return int(token)
    if token in names:
        return low + names.index(token)
    raise CronError(f"{field}: {token!r} is not a number{' or a name' if names else ''}")


def _field(text: str, field: str, low: int, high: int, names: tuple[str, ...]) -> set[int]:
    values: set[int] = set()
    for part in text.lower().split(","):
        match = PART.fullmatch(part)
        if not match:
            raise CronError(f"{field}: {part!r} is not *, a value, a range or a step")
        span, step = match.group(1), int(match.group(2) or 1)
        if step < 1:
            raise CronError(f"{field}: a step is at least 1")
        if span == "*":
            first, last = low, high
        else:
            first_text, _, last_text = span.partition("-")
            first = _value(first_text, low, names, field)
            last = _value(last_text, low, names, field) if last_text else (
                high if match.group(2) else first)
        if not low <= first <= last <= high:
            raise CronError(f"{field}: {part!r} is outside {low}-{high}")
        values.update(range(first, last + 1, step))
    return values


def parse_cron(text: str) -> Cron:
    if not isinstance(text, str) or len(text) > 200:
        raise CronError("a cron expression is five fields, such as '0 3 * * *'")
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{text!r}: a cron expression has five fields "
                        "(minute hour day-of-month month day-of-week), such as '0 3 * * *'")
    values = [_field(part, *spec) for part, spec in zip(parts, FIELDS, strict=True)]
    weekdays = {day % 7 for day in values[4]}
    return Cron(text=" ".join(parts), minutes=frozenset(values[0]), hours=frozenset(values[1]),
                days=frozenset(values[2]), months=frozenset(values[3]),
                weekdays=frozenset(weekdays), any_day=parts[2].startswith("*"),
                any_weekday=parts[4].startswith("*"))
