"""The runs pages: the org's runs (filtered, paginated, refreshed by HTMX
polling while any is live) and one run."""
from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for

from app.dashboard import bp
from app.dashboard.auth import login_required
from app.models import RUN_STATUSES
from app.services.catalog import catalog
from app.services.logs import log_window
from app.services.run_text import hardware, header_line, summary_line
from app.services.runs import LIVE, find_run, page_of_runs, run_json, stop_run
from app.web.request_args import int_arg


@bp.get("/")
@login_required
def runs():
    filters = {key: request.args.get(key) or None for key in ("project", "status", "gpu")}
    page, next_cursor = page_of_runs(g.user.org, before=int_arg("before", None),
                                     **filters)
    next_url = None if next_cursor is None else url_for(
        "dashboard.runs", before=next_cursor, **{k: v for k, v in filters.items() if v})
    context = dict(runs=[(run, run_json(run), hardware(run)) for run in page],
                   next_url=next_url, filters=filters, statuses=RUN_STATUSES,
                   gpus=list(catalog()), live=any(run.status in LIVE for run in page))
    # HTMX polling asks for the table alone.
    template = "_runs_table.html" if request.headers.get("HX-Request") else "runs.html"
    return render_template(template, **context)


@bp.get("/runs/<name>")
@login_required
def run_page(name: str):
    run = find_run(g.user.org, name)
    live = run.status in LIVE
    chunks, starts, offsets = log_window(g.user.org, run)
    return render_template("run.html", run=run, doc=run_json(run), header=header_line(run),
                           hw=hardware(run), summary=summary_line(run), live=live, chunks=chunks,
                           starts=starts, offsets=offsets, polling=live)


@bp.get("/runs/<name>/stop")
@login_required
def stop_confirm(name: str):
    """Asks first, with or without JavaScript."""
    run = find_run(g.user.org, name)
    return render_template("stop.html", run=run, live=run.status in LIVE)


@bp.post("/runs/<name>/stop")
@login_required
def stop(name: str):
    run = find_run(g.user.org, name)
    stopping = stop_run(run)
    flash(f"Stopping {run.name}: it ends canceled." if stopping
          else f"{run.name} has already ended ({run.status}).")
    return redirect(url_for("dashboard.run_page", name=run.name))
