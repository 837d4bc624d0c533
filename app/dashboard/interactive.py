"""An interactive run's own URLs on the dashboard: its notebook
(/runs/<name>/notebook/, JupyterLab and its REST API) and its terminal
(/runs/<name>/terminal, a WebSocket), both passed to the run by
app/web/run_proxy.py.

Either credential opens them: an API key of a member of the run's org
(div shell, scripts on Jupyter's REST API), or the dashboard's session of
the member who started the run. A run's pages come from the org's own code
and are served from this site's origin, so in a browser they open for
their owner alone: never in another member's session, which the page's
scripts could otherwise act in. A request in a session that changes
anything, and every WebSocket, must come from this site's own pages
(Origin): a cross-site page can neither post to a notebook nor open a
terminal with the member's cookie."""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import g, redirect, render_template, request, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.extensions import csrf
from divergent.app.models import LIVE, Run, User
from divergent.app.services.errors import Forbidden, Unavailable
from divergent.app.services.runs.interactive import BATCH, NOTEBOOK, SHELL
from divergent.app.services.runs.listing import find_run
from divergent.app.services.site.request_slots import INTERACTIVE, take_slot
from divergent.app.web.credentials import bearer_key, key_row, signed_in_user
from divergent.app.web.errors import error_response
from divergent.app.web.run_proxy import proxy

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _same_origin() -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return request.method in ("GET", "HEAD") and "Upgrade" not in request.headers
    parts, ours = urlsplit(origin), urlsplit(request.host_url)
    return (parts.scheme, parts.netloc) == (ours.scheme, ours.netloc)


def _reached(name: str, *kinds: str):
    """The view's answer: the run's, or why not."""
    key = bearer_key()
    user: User | None
    if key is not None:
        row = key_row(key)
        if row is None:
            return error_response(401, "invalid or missing API key")
        user = row.user
    else:
        user = signed_in_user()
        if user is None:
            if request.method == "GET" and "Upgrade" not in request.headers:
                return redirect(url_for("dashboard.login", next=request.path))
            return error_response(401, "sign in, or send an API key")
        if not _same_origin():
            raise Forbidden("this run's pages are opened from this site alone")
    g.user = user
    run: Run = find_run(user.org, name)
    if run.kind not in kinds:
        return error_response(404, f"{name} has no {'notebook' if NOTEBOOK in kinds else 'terminal'}")
    if key is None and run.user_id != user.id:
        raise Forbidden(f"{name} is {run.user.username}'s: its pages open in its owner's browser "
                        "alone (with an API key, any member of the org reaches it)")
    try:
        return proxy(run, take_slot(INTERACTIVE, run.org_id))
    except Unavailable as exc:
        # Jupyter takes seconds to start: a browser is shown why and asks again.
        if key is not None or request.method != "GET" or "Upgrade" in request.headers:
            raise
        return render_template("starting.html", run=run, reason=str(exc)), 503


# Werkzeug's routing tells WebSockets from HTTP: a notebook's paths take both.
@bp.route("/runs/<name>/notebook/", defaults={"rest": ""}, methods=METHODS)
@bp.route("/runs/<name>/notebook/<path:rest>", methods=METHODS)
@bp.route("/runs/<name>/notebook/<path:rest>", methods=["GET"], websocket=True)
@csrf.exempt
def notebook(name: str, rest: str):
    return _reached(name, NOTEBOOK)


@bp.route("/runs/<name>/terminal", methods=["GET"], websocket=True)
@csrf.exempt
def terminal(name: str):
    """A shell run's terminal, or a new shell beside a batch run's command."""
    return _reached(name, SHELL, BATCH)


@bp.get("/runs/<name>/shell")
@login_required
def run_shell(name: str):
    """A shell run's terminal in the page (xterm.js on the run's WebSocket)."""
    run = find_run(g.user.org, name)
    if run.kind != SHELL:
        return error_response(404, f"{name} is not a shell run")
    return render_template("shell.html", run=run, live=run.status in LIVE,
                           owner=run.user_id == g.user.id)
