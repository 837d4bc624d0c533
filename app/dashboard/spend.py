"""The Spend page: this month by project and GPU type, a chart by day, the
org's limit and what is left."""
from __future__ import annotations

from datetime import timedelta

from flask import g, render_template, request

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.models import utcnow
from divergent.app.services.money.pricing import format_usd
from divergent.app.services.money.usage import month_bounds, spend_by_day, usage_report


@bp.get("/spend")
@login_required
def spend():
    month = request.args.get("month") or None
    report = usage_report(g.user.org, month)
    days = spend_by_day(g.user.org, month)
    start, end, _ = month_bounds(month)
    before = None if start.year == 1 and start.month == 1 else \
        (start - timedelta(days=1)).strftime("%Y-%m")
    after = end.strftime("%Y-%m") if end <= utcnow() else None
    return render_template("spend.html", report=report, days=days, usd=format_usd,
                           before=before, after=after, spent_any=bool(report["projects"]))
