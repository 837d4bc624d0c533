"""The Spend page: this month by project and GPU type, a chart by day, the
org's limit and what is left."""
from __future__ import annotations

import sqlalchemy as sa
from flask import g, render_template, request

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.extensions import db
from app.models import Run
from app.services.pricing import format_usd
from app.services.usage import month_bounds, usage_report


def spend_by_day(org, month: str | None) -> list[tuple[str, int]]:
    start, end, _ = month_bounds(month)
    day = sa.func.date(Run.created_at)
    rows = db.session.execute(
        sa.select(day, sa.func.sum(Run.cost_micros)).where(
            Run.org_id == org.id, Run.created_at >= start, Run.created_at < end)
        .group_by(day).order_by(day)).all()
    return [(str(d), int(c)) for d, c in rows]


@bp.get("/spend")
@login_required
def spend():
    month = request.args.get("month")
    report = usage_report(g.user.org, month)
    days = spend_by_day(g.user.org, month)
    return render_template("spend.html", report=report, days=days, usd=format_usd)
