"""Five-field cron expressions (minute hour day-of-month month day-of-week),
as crontab(5) reads them, in a time zone's wall-clock time (UTC unless
told): `*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists `a,b`,
month and day names (jan, mon), 0 or 7 for Sunday; when both day fields are
restricted, a day matching either runs.

Across daylight-saving changes every matching wall-clock minute fires once:
one the clocks skip (02:30 when they jump from 02:00 to 03:00) fires at the
first minute that exists after it, and one they pass twice (02:30 when they
fall back from 03:00 to 02:00) fires the first time only. croniter 7 fires
the second case twice, which is why this parser stays.
Pure: no I/O, no clock."""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from divergent.app.services.errors import Invalid

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

    def _wall_clock_matches(self, start: datetime) -> Iterator[datetime]:
        """Matching wall-clock minutes (naive) from `start` on, in order."""
        day = start.replace(hour=0, minute=0)
        for _ in range(SEARCH_DAYS):
            if self._day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        candidate = day.replace(hour=hour, minute=minute)
                        if candidate >= start:
                            yield candidate
            day += timedelta(days=1)

    def next_after(self, moment: datetime, zone: tzinfo = UTC) -> datetime:
        """The first instant strictly after `moment` (aware) at which a
        matching minute of `zone`'s wall clock fires, in UTC."""
        local = moment.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
        for wall in self._wall_clock_matches(local):
            instant = _instant(wall, zone)
            if instant > moment:
                return instant
        raise CronError(f"{self.text!r} never matches a real date")


def _instant(wall: datetime, zone: tzinfo) -> datetime:
    """When `zone`'s clocks show `wall` (the first time, if they show it
    twice), in UTC; a time they skip is the first minute after it that they
    show."""
    while True:
        instant = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == wall:
            return instant
        wall += timedelta(minutes=1)


def parse_zone(name: object) -> ZoneInfo:
    """An IANA time zone name (Europe/Berlin), as zoneinfo knows it."""
    if not isinstance(name, str) or name not in _zone_names():
        raise Invalid(f"unknown time zone {name!r}: use an IANA name such as "
                      "Europe/Berlin, America/New_York or UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise Invalid(f"unknown time zone {name!r}") from exc


@functools.cache
def _zone_names() -> frozenset[str]:
    """The names zoneinfo can load: checked first so that a user's string
    never becomes a path ZoneInfo would open."""
    return frozenset(available_timezones() | {"UTC"})


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


def parse_cron(text: object) -> Cron:
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


DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
               "September", "October", "November", "December")


def _named(text: str, names: tuple[str, ...], short: tuple[str, ...], low: int) -> str:
    """A day or month field in words: "mon-fri" is "Monday to Friday"."""
    def one(token: str) -> str:
        index = int(token) - low if token.isdigit() else short.index(token)
        return names[index % len(names)]
    words = []
    for part in text.lower().split(","):
        span, _, step = part.partition("/")
        first, _, last = span.partition("-")
        word = "every day" if first == "*" else one(first) + (f" to {one(last)}" if last else "")
        words.append(word + (f" (every {step})" if step else ""))
    return ", ".join(words)


def _clock(hour: str, minute: str | int) -> str:
    return f"{int(hour):02d}:{int(minute):02d}"


def describe(cron: Cron) -> str:
    """The expression in plain words: "at 03:00 every day", "every 15
    minutes from 09:00 to 17:45 on Monday to Friday"; fields too involved
    for words are quoted."""
    minute, hour, day, month, weekday = cron.text.split()
    first, _, last = hour.partition("-")
    hour_span = first.isdigit() and last.isdigit()
    span = (f" from {_clock(first, min(cron.minutes))} to {_clock(last, max(cron.minutes))}"
            if hour_span else "")
    if minute.isdigit() and all(h.isdigit() for h in hour.split(",")):
        when = "at " + " and ".join(_clock(h, minute) for h in hour.split(","))
    elif minute.isdigit() and hour == "*":
        when = f"at minute {int(minute)} of every hour"
    elif minute.isdigit() and hour_span:
        when = f"every hour{span}"
    elif minute.isdigit() and hour.startswith("*/") and hour[2:].isdigit():
        when = f"every {hour[2:]} hours from {_clock('0', minute)}"
    elif minute == "*" and (hour == "*" or hour_span):
        when = f"every minute{span}"
    elif minute.startswith("*/") and minute[2:].isdigit() and (hour == "*" or hour_span):
        when = f"every {minute[2:]} minutes{span}"
    else:
        when = f"at minutes {minute} of hours {hour}"
    days = []
    if day != "*":
        days.append(f"on day {day} of the month")
    if weekday != "*":
        days.append("on " + _named(weekday, DAY_NAMES, DAYS, 0))
    if days or not when.startswith("every"):     # "every minute", not "every minute every day"
        when += " " + (" or ".join(days) if days else "every day")
    if month != "*":
        when += " in " + _named(month, MONTH_NAMES, MONTHS, 1)
    return when
