"""An org's spend per calendar month (UTC): what its runs cost, by project
and GPU type, against its monthly limit, and what a new run may spend."""
from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.engine import Row

from divergent.app.extensions import db
from divergent.app.models import LIVE, Org, Project, Run, User, utcnow
from divergent.app.services.errors import Invalid, ServiceError
from divergent.app.services.money.pricing import format_usd


class LimitReached(ServiceError):
    status = 403


MONTH = re.compile(r"(\d{4})-(\d{2})", re.ASCII)


def month_bounds(month: str | None = None) -> tuple[datetime, datetime, str]:
    """[start, end) of a month given as YYYY-MM (default: this one)."""
    if month is None:
        now = utcnow()
        year, number = now.year, now.month
    else:
        match = MONTH.fullmatch(month)
        year, number = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
        if not (1 <= year <= 9998 and 1 <= number <= 12):
            raise Invalid(f"month {month[:20]!r}: use YYYY-MM")
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + (number == 12), number % 12 + 1, 1, tzinfo=UTC)
    return start, end, f"{year:04d}-{number:02d}"


def _in_month(org: Org, start: datetime, end: datetime):
    return sa.and_(Run.org_id == org.id, Run.created_at >= start, Run.created_at < end)


def month_spend(org: Org, month: str | None = None) -> int:
    start, end, _ = month_bounds(month)
    total = db.session.execute(
        sa.select(sa.func.coalesce(sa.func.sum(Run.cost_micros), 0)).where(
            _in_month(org, start, end))).scalar_one()
    return int(total)


def usage_report(org: Org, month: str | None = None) -> dict:
    start, end, label = month_bounds(month)
    where = _in_month(org, start, end)
    by_project = db.session.execute(
        sa.select(Project.name, sa.func.sum(Run.cost_micros), sa.func.count())
        .join(Project, Project.id == Run.project_id).where(where)
        .group_by(Project.name).order_by(Project.name)).all()
    by_gpu = db.session.execute(
        sa.select(Run.gpu_type, sa.func.sum(Run.cost_micros), sa.func.count())
        .where(where).group_by(Run.gpu_type).order_by(Run.gpu_type)).all()
    by_user = db.session.execute(
        sa.select(User.username, sa.func.sum(Run.cost_micros), sa.func.count())
        .join(User, User.id == Run.user_id).where(where)
        .group_by(User.username).order_by(User.username)).all()
    spent = sum(int(row[1]) for row in by_project)
    limit = org.monthly_limit_micros
    return {"month": label, "spent_micros": spent, "limit_micros": limit,
            "left_micros": None if limit is None else max(0, limit - spent),
            "projects": [{"project": p, "cost_micros": int(c), "runs": n} for p, c, n in by_project],
            "gpus": [{"gpu": g, "cost_micros": int(c), "runs": n} for g, c, n in by_gpu],
            "users": [{"user": u, "cost_micros": int(c), "runs": n} for u, c, n in by_user]}


def reserved(org: Org) -> int:
    """What the org's live runs may still spend: each one's time limit at
    its rate (billed by the started minute), less what it has cost so far."""
    rows = db.session.execute(
        sa.select(Run.time_limit_minutes, Run.rate_micros_per_hour, Run.cost_micros).where(
            Run.org_id == org.id, Run.status.in_(LIVE), Run.time_limit_minutes.is_not(None)))
    # Only runs with a time limit (the query's last condition).
    return sum(max(0, cast(int, minutes) * rate // 60 - cost) for minutes, rate, cost in rows)


def hold_spend(org: Org) -> None:
    """Locks the org's row until the transaction ends (PostgreSQL's row lock,
    SQLite's write lock): one admission at a time reads what is spent and
    reserved and adds its run, so parallel runs never share the same rest
    of the limit."""
    db.session.execute(sa.update(Org).where(Org.id == org.id)
                       .values(monthly_limit_micros=Org.monthly_limit_micros))


def minutes_left(org: Org, rate_micros_per_hour: int) -> int | None:
    """Whole minutes a new run at this rate may run before the org reaches its
    limit, counting what its live runs may still spend (None: no limit).
    Refuses a run that would start over it."""
    if org.monthly_limit_micros is None:
        return None
    spent, held = month_spend(org), reserved(org)
    left = org.monthly_limit_micros - spent - held
    minutes = max(0, left) * 60 // rate_micros_per_hour
    if minutes < 1:
        reserve = f", {format_usd(held)} held by live runs" if held else ""
        raise LimitReached(
            f"the org's usage limit of {format_usd(org.monthly_limit_micros)} a month is reached "
            f"({format_usd(spent)} spent this month{reserve}); an admin can raise it")
    return minutes


def spend_by_day(org: Org, month: str | None) -> list[tuple[str, int]]:
    """Each day of the month up to today (or its end), runs' cost by the day
    they were made, zero where nothing ran: the chart's bars and its table."""
    start, end, _ = month_bounds(month)
    day = sa.func.date(Run.created_at)
    # The day as the database gives it (a string on SQLite), and its cost.
    rows: Sequence[Row[Any, int]] = db.session.execute(
        sa.select(day, sa.func.sum(Run.cost_micros)).where(_in_month(org, start, end))
        .group_by(day)).all()
    spent = {str(d): int(c) for d, c in rows}
    last = min(end, utcnow() + timedelta(days=1))
    days = [(start + timedelta(days=n)).date().isoformat()
            for n in range((last - start).days)]
    return [(d, spent.get(d, 0)) for d in days]
