"""A run's log on its page: the tail rendered with the page (readable with
JavaScript off), then new bytes appended by HTMX polling from the offsets
the page already shows; earlier windows are paged in above it on request.
stdout and stderr are told apart by class and mark."""
from __future__ import annotations

from flask import g, render_template, request

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.models import LIVE
from divergent.app.services.runs.listing import find_run
from divergent.app.services.runs.logs import STREAMS, log_since, log_window
from divergent.app.web.request_args import int_arg


@bp.get("/runs/<name>/log")
@login_required
def run_log(name: str):
    """New log bytes from ?stdout=&stderr= on, appended to the page's log,
    and the next poll (none once the run has ended and all is shown)."""
    run = find_run(g.user.org, name)
    offsets = {s: int_arg(s, 0) for s in STREAMS}
    ended = run.status not in LIVE
    chunks, offsets = log_since(g.user.org, run, offsets)
    return render_template("_log_poll.html", run=run, chunks=chunks, offsets=offsets,
                           polling=not ended or bool(chunks))


@bp.get("/runs/<name>/log/earlier")
@login_required
def run_log_earlier(name: str):
    """The window of each stream before ?stdout=&stderr=: put above the log
    by HTMX, or a page of its own with JavaScript off."""
    run = find_run(g.user.org, name)
    ends = {s: int_arg(s, 0) for s in STREAMS}
    chunks, starts, _ = log_window(g.user.org, run, ends)
    template = "_log_earlier_swap.html" if request.headers.get("HX-Request") else "log_earlier.html"
    return render_template(template, run=run, chunks=chunks, starts=starts)
