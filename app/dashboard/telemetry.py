"""The Telemetry tab: charts of the run's metrics (uPlot), laid out by its
telemetry.toml, and below them the system's (what it used: CPU, memory,
GPUs), refreshed while the run runs."""
from __future__ import annotations

import os

from flask import g, jsonify, render_template

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.models import LIVE
from divergent.app.services.accounts.secrets import log_masker, mask_point
from divergent.app.services.files.volumes import run_dir
from divergent.app.services.runs.listing import find_run
from divergent.app.services.runs.metrics import read_points
from divergent.app.services.runs.telemetry import (
    MAX_BYTES,
    MAX_POINTS,
    chart_data,
    default_charts,
    parse_layout,
)
from divergent.app.services.runs.usage import system_charts, usage_json


def _charts(run) -> tuple[list[dict], str | None]:
    state_dir = run_dir(g.user.org, run.name)
    points = read_points(os.path.join(state_dir, "metrics.jsonl"), MAX_BYTES, MAX_POINTS)
    if run.secrets_sealed:   # a secret's value is *** here as in the log
        masker = log_masker(run)
        points = [mask_point(masker, point) for point in points]
    layout, problem = parse_layout(run.telemetry)
    charts = layout if layout is not None else default_charts(points)
    return [chart_data(chart, points) for chart in charts] + system_charts(state_dir), problem


@bp.get("/runs/<name>/telemetry")
@login_required
def run_telemetry(name: str):
    run = find_run(g.user.org, name)
    charts, problem = _charts(run)
    return render_template("telemetry.html", run=run, charts=charts, problem=problem,
                           live=run.status in LIVE, usage=usage_json(run))


@bp.get("/runs/<name>/telemetry.json")
@login_required
def run_telemetry_data(name: str):
    run = find_run(g.user.org, name)
    charts, problem = _charts(run)
    return jsonify(charts=charts, problem=problem, live=run.status in LIVE)
