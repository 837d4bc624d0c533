"""Cron expressions as crontab(5) reads them, in UTC."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.services.cron import CronError, parse_cron


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
