"""The runs pages: the org's runs (filtered, paginated, refreshed by HTMX
polling while any is live) and one run."""
from __future__ import annotations

from flask import Response, flash, g, redirect, render_template, request, stream_with_context, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.models import LIVE, RUN_STATUSES
from divergent.app.services.accounts.orgs import members_of
from divergent.app.services.errors import ServiceError
from divergent.app.services.money.catalog import catalog
from divergent.app.services.runs.idle import idle_notice
from divergent.app.services.runs.listing import find_run, page_of_runs, run_json
from divergent.app.services.runs.logs import log_window, masked_stream
from divergent.app.services.runs.request import rerun_request
from divergent.app.services.runs.stop import stop_run
from divergent.app.services.runs.submit import create_run
from divergent.app.services.runs.text import cli_command, hardware, header_line, summary_line
from divergent.app.services.site.request_slots import TRANSFER
from divergent.app.services.site.slurm_access import current_site
from divergent.app.web.request_args import int_arg
from divergent.app.web.slots import holding_slot

# The runs list's filters: ?q= a part of the name, ?user= a username, and
# project, status and GPU type as they are; each runs_query's argument.
FILTERS = {"q": "name", "project": "project", "user": "username", "status": "status",
           "gpu": "gpu"}


@bp.get("/")
@login_required
def runs():
    filters = {key: request.args.get(key) or None for key in FILTERS}
    page, next_cursor = page_of_runs(g.user.org, before=int_arg("before", None),
                                     **{FILTERS[key]: value for key, value in filters.items()})
    next_url = None if next_cursor is None else url_for(
        "dashboard.runs", before=next_cursor, **{k: v for k, v in filters.items() if v})
    context = dict(runs=[(run, run_json(run), hardware(run)) for run in page],
                   next_url=next_url, filters=filters, statuses=RUN_STATUSES,
                   gpus=list(catalog()), users=[u.username for u in members_of(g.user.org_id)],
                   live=any(run.status in LIVE for run in page))
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
                           starts=starts, offsets=offsets, polling=live,
                           command=cli_command(run),
                           idle=idle_notice(run, current_site().usage))


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


@bp.post("/runs/<name>/rerun")
@login_required
def rerun(name: str):
    """A new run of what this one ran (`div rerun`), as the signed-in user."""
    try:
        again = create_run(g.user, rerun_request(find_run(g.user.org, name)))
    except ServiceError as exc:
        flash(f"{name} was not run again: {exc.message}")
        return redirect(url_for("dashboard.run_page", name=name))
    flash(f"{again.name} runs what {name} ran.")
    return redirect(url_for("dashboard.run_page", name=again.name))


@bp.get("/runs/<name>/<any(stdout, stderr):stream>.txt")
@login_required
@holding_slot(TRANSFER)
def log_download(name: str, stream: str):
    """One stream of the log, whole, as a file (its secrets masked)."""
    run = find_run(g.user.org, name)
    return Response(stream_with_context(masked_stream(g.user.org, run, stream)),
                    mimetype="text/plain", headers={
                        "Content-Disposition": f'attachment; filename="{run.name}.{stream}.txt"',
                        "X-Content-Type-Options": "nosniff"})
