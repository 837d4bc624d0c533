"""The Spend page: this month by project and GPU type, a chart by day, the
org's limit and what is left."""
from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa
from flask import g, render_template, request

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.extensions import db
from app.models import Run, utcnow
from app.services.pricing import format_usd
from app.services.usage import month_bounds, usage_report


def spend_by_day(org, month: str | None) -> list[tuple[str, int]]:
    """Each day of the month up to today (or its end), runs' cost by the day
    they were made, zero where nothing ran: the chart's bars and its table."""
    start, end, _ = month_bounds(month)
    day = sa.func.date(Run.created_at)
    rows = db.session.execute(
        sa.select(day, sa.func.sum(Run.cost_micros)).where(
            Run.org_id == org.id, Run.created_at >= start, Run.created_at < end)
        .group_by(day)).all()
    spent = {str(d): int(c) for d, c in rows}
    last = min(end, utcnow() + timedelta(days=1))
    days = [(start + timedelta(days=n)).date().isoformat()
            for n in range((last - start).days)]
    return [(d, spent.get(d, 0)) for d in days]


@bp.get("/spend")
@login_required
def spend():
    month = request.args.get("month")
    report = usage_report(g.user.org, month)
    days = spend_by_day(g.user.org, month)
    return render_template("spend.html", report=report, days=days, usd=format_usd)
