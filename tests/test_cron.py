"""Cron expressions as crontab(5) reads them, in UTC or a time zone (across
daylight-saving changes too), and in plain words."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from divergent.app.services.errors import Invalid
from divergent.app.services.runs.cron import CronError, describe, parse_cron, parse_zone


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("expression, after, expected", [
    ("* * * * *", "2026-11-30 21:03:32", "2026-11-30 21:04:00"),
    ("0 3 * * *", "2026-11-30 21:03:00", "2026-12-01 03:00:00"),
    ("0 3 * * *", "2026-12-01 02:59:59", "2026-12-01 03:00:00"),
    ("0 3 * * *", "2026-12-01 03:00:00", "2026-12-02 03:00:00"),      # strictly after
    ("*/15 9-17 * * mon-fri", "2026-12-04 17:50:00", "2026-12-07 09:00:00"),  # Fri -> Mon
    ("30 2 29 2 *", "2026-03-01 00:00:00", "2028-02-29 02:30:00"),    # the next leap day
    ("0 0 1,15 * sun", "2026-12-02 00:00:00", "2026-12-06 00:00:00"),  # either day field
    ("0 0 */10 * 7", "2026-12-02 00:00:00", "2027-01-31 00:00:00"),    # */: both must match
    ("5 4 * jan,jul *", "2026-11-30 00:00:00", "2027-01-01 04:05:00"),
    ("0 12 * * 0", "2026-11-30 12:00:00", "2026-12-06 12:00:00"),     # 0 and 7: Sunday
])
def test_the_next_time_is_the_first_matching_minute_after(expression, after, expected):
    assert parse_cron(expression).next_after(at(after)) == at(expected)


@pytest.mark.parametrize("expression, says", [
    ("0 3 * *", "five fields"), ("60 * * * *", "minute"), ("* 24 * * *", "hour"),
    ("* * 0 * *", "day of month"), ("* * * 13 *", "month"), ("* * * * 8", "day of week"),
    ("*/0 * * * *", "step"), ("5-1 * * * *", "minute"), ("* * * foo *", "month"),
    ("0 0 31 2 *", "never matches"), ("@daily", "five fields"), ("; rm -rf / * * * *", "minute"),
])
def test_bad_expressions_say_which_field(expression, says):
    with pytest.raises(CronError, match=says):
        parse_cron(expression).next_after(at("2026-11-30 00:00:00"))


BERLIN = parse_zone("Europe/Berlin")


@pytest.mark.parametrize("after, expected", [
    # Spring forward, 29 March 2026: 02:30 never shows; it runs once, at 03:00 CEST.
    ("2026-03-28 12:00:00", "2026-03-29 01:00:00"),
    ("2026-03-29 01:00:00", "2026-03-30 00:30:00"),
    # Fall back, 25 October 2026: 02:30 shows twice; it runs the first time only.
    ("2026-10-24 12:00:00", "2026-10-25 00:30:00"),
    ("2026-10-25 00:30:00", "2026-10-26 01:30:00"),
    ("2026-10-25 01:15:00", "2026-10-26 01:30:00"),   # during the second 02:xx
])
def test_a_daily_time_runs_once_on_both_daylight_saving_days(after, expected):
    assert parse_cron("30 2 * * *").next_after(at(after), BERLIN) == at(expected)


def test_hourly_runs_follow_the_wall_clock_across_the_change():
    moment, fired = at("2026-10-24 22:30:00"), []
    for _ in range(5):
        moment = parse_cron("0 * * * *").next_after(moment, BERLIN)
        fired.append(moment.astimezone(BERLIN).strftime("%H:%M %Z"))
    assert fired == ["01:00 CEST", "02:00 CEST", "03:00 CET", "04:00 CET", "05:00 CET"]


def test_new_york_is_read_in_its_own_time():
    eastern = parse_zone("America/New_York")
    assert parse_cron("0 9 * * mon-fri").next_after(at("2026-12-04 15:00:00"), eastern) == \
        at("2026-12-07 14:00:00")


@pytest.mark.parametrize("expression, words", [
    ("0 3 * * *", "at 03:00 every day"),
    ("0 3,15 * * 1-5", "at 03:00 and 15:00 on Monday to Friday"),
    ("*/15 * * * *", "every 15 minutes"),
    ("*/15 9-17 * * mon-fri", "every 15 minutes from 09:00 to 17:45 on Monday to Friday"),
    ("* * * * *", "every minute"),
    ("* 9-17 * * *", "every minute from 09:00 to 17:59"),
    ("30 9-17 * * *", "every hour from 09:30 to 17:30"),
    ("0,30 9-17 * * *", "at minutes 0,30 of hours 9-17 every day"),
    ("5 4 * jan,jul *", "at 04:05 every day in January, July"),
    ("0 0 1,15 * sun", "at 00:00 on day 1,15 of the month or on Sunday"),
    ("5 */2 * * *", "every 2 hours from 00:05"),
])
def test_schedules_are_described_in_plain_words(expression, words):
    assert describe(parse_cron(expression)) == words


@pytest.mark.parametrize("name", ["Mars/Olympus", "../../../etc/passwd", "/etc/localtime",
                                  "", 3, "Europe/Berlin\n"])
def test_unknown_time_zones_are_refused_by_name(name):
    with pytest.raises(Invalid, match="time zone"):
        parse_zone(name)
