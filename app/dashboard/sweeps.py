"""A sweep's page: one row a member run, with its values, status, key
metrics, check verdicts and cost, sortable by any column; a chart of the
first key metric across the members; and what the whole came to. The
sweeps index lists the org's sweeps, newest first."""
from __future__ import annotations

from flask import g, render_template, request

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.services.runs.sweeps import find_sweep, members_of, sweep_json, sweeps_of

# Metrics shown as columns: the first this many names the members reported.
KEY_METRICS = 4
SWEEPS_LISTED = 50


@bp.get("/sweeps")
@login_required
def sweeps_page():
    listed = [sweep_json(sweep) for sweep in sweeps_of(g.user.org, SWEEPS_LISTED)]
    return render_template("sweeps.html", sweeps=listed)


@bp.get("/sweeps/<name>")
@login_required
def sweep_page(name: str):
    sweep = find_sweep(g.user.org, name)
    doc = sweep_json(sweep, members_of(sweep))
    metrics = list(dict.fromkeys(key for run in doc["runs"] for key in run["metrics"]))
    metrics = metrics[:KEY_METRICS]
    column, descending = _sort_column(doc, metrics)
    keyed = [(_sort_key(run, column), run) for run in doc["runs"]]
    # Members without the value stay last whichever way the rest go.
    doc["runs"] = ([run for key, run in sorted((k for k in keyed if k[0][0] < 2),
                                               key=lambda k: k[0], reverse=descending)]
                   + [run for key, run in keyed if key[0] == 2])
    return render_template("sweep.html", sweep=doc, metrics=metrics,
                           live=doc["status"] in ("queued", "running"), sort=column,
                           descending=descending, charts=_charts(doc, metrics))


def _sort_column(doc: dict, metrics: list[str]) -> tuple[str, bool]:
    """?sort=COLUMN (an axis, a key metric, status or cost; # by default),
    ?desc=1 for largest first. A column the page does not show is #."""
    wanted = request.args.get("sort", "#")
    allowed = {"#", "status", "cost", *(f"axis:{k}" for k in doc["axes"]),
               *(f"metric:{m}" for m in metrics)}
    return (wanted if wanted in allowed else "#"), request.args.get("desc") == "1"


def _sort_key(run: dict, column: str) -> tuple:
    """Numbers before text, and members without the value last."""
    if column == "#":
        value = run["sweep_index"]
    elif column == "status":
        value = run["status"]
    elif column == "cost":
        value = float(run["cost"])
    elif column.startswith("axis:"):
        value = (run["sweep_values"] or {}).get(column[5:])
    else:
        value = run["metrics"].get(column[7:])
    number = _number(value)
    if number is not None:
        return (0, number, "")
    return (1, 0.0, str(value)) if value is not None else (2, 0.0, "")


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _charts(doc: dict, metrics: list[str]) -> list[dict]:
    """The first key metric of each member that reported it, by member
    index: the sweep's result at a glance."""
    if not metrics:
        return []
    points = sorted((run["sweep_index"], _number(run["metrics"].get(metrics[0])))
                    for run in doc["runs"])
    points = [(index, value) for index, value in points if value is not None]
    if not points:
        return []
    return [{"title": f"{metrics[0]} by member", "x": "member", "metrics": [metrics[0]],
             "data": [[index for index, _ in points], [value for _, value in points]]}]
