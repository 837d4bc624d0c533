"""A sweep's page: one row a member run, with its values, status, key
metrics, check verdicts and cost, and what the whole came to."""
from __future__ import annotations

from flask import g, render_template

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.services.sweeps import find_sweep, members_of, sweep_json

# Metrics shown as columns: the first this many names the members reported.
KEY_METRICS = 4


@bp.get("/sweeps/<name>")
@login_required
def sweep_page(name: str):
    sweep = find_sweep(g.user.org, name)
    doc = sweep_json(sweep, members_of(sweep))
    metrics = list(dict.fromkeys(key for run in doc["runs"] for key in run["metrics"]))
    return render_template("sweep.html", sweep=doc, metrics=metrics[:KEY_METRICS],
                           live=doc["status"] == "running")
