"""The Schedules page: the org's schedules, when each runs next and how its
last run went."""
from __future__ import annotations

from flask import flash, g, redirect, render_template, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.services.runs.schedules import delete_schedule, schedule_json, schedules_of


@bp.get("/schedules")
@login_required
def schedules():
    return render_template("schedules.html", schedules=[
        (row, schedule_json(row)) for row in schedules_of(g.user.org)])


@bp.post("/schedules/<name>/delete")
@login_required
def schedule_delete(name: str):
    delete_schedule(g.user.org, name)
    flash(f"Schedule {name} deleted; runs it started go on.")
    return redirect(url_for("dashboard.schedules"))
