"""An interactive run's own URLs: its notebook (/runs/<name>/notebook/,
JupyterLab and its REST API) and its terminal (/runs/<name>/terminal, a
WebSocket), passed to the run by app/web/run_proxy.py.

An API key of a member of the run's org opens either, on any of the
server's names (div shell, scripts on Jupyter's REST API). In a browser:

- A notebook's pages are the org's own code (any member with a key can
  change what it serves), so they never load on the dashboard's origin,
  where their scripts could act in the viewer's session. The dashboard's
  session of the member who started the run gets a one-minute ticket to the
  site's notebook host (another name of this server's, [interactive]
  notebook_host), which trades it for a cookie of that host's, for that
  run's path alone. The notebook host serves notebooks and nothing else.
- A terminal is bytes drawn by the dashboard's own script (xterm.js): it
  opens on the dashboard, in its owner's session.

A request in a session that changes anything, and every WebSocket, must
come from the same origin's pages (Origin)."""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import current_app, g, redirect, render_template, request, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.extensions import csrf
from divergent.app.models import LIVE, Run, User
from divergent.app.services.accounts.passwords import user_for_session
from divergent.app.services.errors import Forbidden, Unavailable
from divergent.app.services.runs.interactive import BATCH, NOTEBOOK, SHELL
from divergent.app.services.runs.listing import find_run
from divergent.app.services.site.request_slots import INTERACTIVE, take_slot
from divergent.app.services.site.settings import load_site
from divergent.app.web.credentials import bearer_key, key_row, signed_in_user
from divergent.app.web.errors import error_response
from divergent.app.web.run_proxy import proxy

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
TICKET_SECONDS = 60
# The notebook host's cookie: one a run, for its path alone, signed.
COOKIE = "div_notebook"
COOKIE_SECONDS = 12 * 3600
NOTEBOOK_ENDPOINTS = ("dashboard.notebook", "dashboard.notebook_enter")


def _signer(purpose: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt=f"notebook-{purpose}")


def _notebook_host() -> str | None:
    return load_site().interactive.notebook_host


def on_notebook_host() -> bool:
    host = _notebook_host()
    return host is not None and urlsplit(f"//{request.host}").hostname == host


@bp.before_app_request
def notebook_host_serves_notebooks_alone():
    if on_notebook_host() and request.endpoint not in NOTEBOOK_ENDPOINTS:
        return error_response(404, f"nothing at {request.path} on the notebook host")
    return None


def _same_origin() -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return request.method in ("GET", "HEAD") and "Upgrade" not in request.headers
    parts, ours = urlsplit(origin), urlsplit(request.host_url)
    return (parts.scheme, parts.netloc) == (ours.scheme, ours.netloc)


def _visitor(payload: dict | None) -> User | None:
    """The member a ticket or cookie names, while their dashboard session lasts."""
    return user_for_session(payload.get("user"), payload.get("epoch")) if payload else None


def _signed(purpose: str, value: str, max_age: int) -> dict | None:
    try:
        payload = _signer(purpose).loads(value, max_age=max_age)
    except BadSignature:
        return None
    return payload if isinstance(payload, dict) else None


def _ticket_to_notebook_host(run: Run, user: User):
    """The owner's way from the dashboard to the notebook host."""
    host = _notebook_host()
    if host is None:
        raise Forbidden("this site opens notebooks in a browser on a host of their own, which "
                        "its admin has not named (flask site interactive --notebook-host); "
                        "with an API key, the notebook's REST API answers here")
    # The run's name in its owner's org: one run (the owner checked here and
    # again on every request).
    ticket = _signer("ticket").dumps({"user": user.id, "epoch": user.session_epoch,
                                      "name": run.name})
    port = urlsplit(request.host_url).port
    origin = f"{request.scheme}://{host}" + (f":{port}" if port else "")
    return redirect(f"{origin}{url_for('dashboard.notebook_enter', name=run.name)}?ticket={ticket}")


def _reached(name: str, *kinds: str):
    """The view's answer: the run's, or why not."""
    key = bearer_key()
    user: User | None
    if key is not None:
        row = key_row(key)
        if row is None:
            return error_response(401, "invalid or missing API key")
        user = row.user
    elif on_notebook_host():
        cookie = _signed("cookie", request.cookies.get(COOKIE, ""), COOKIE_SECONDS)
        user = _visitor(cookie)
        if user is None or cookie is None or cookie.get("name") != name:
            return error_response(401, "open this notebook from its run's page on the dashboard")
        if not _same_origin():
            raise Forbidden("this notebook's pages are opened from its own host alone")
    else:
        user = signed_in_user()
        if user is None:
            if request.method == "GET" and "Upgrade" not in request.headers:
                return redirect(url_for("dashboard.login", next=request.path))
            return error_response(401, "sign in, or send an API key")
        if not _same_origin():
            raise Forbidden("this run's pages are opened from this site alone")
    g.user = user
    run = find_run(user.org, name)
    if run.kind not in kinds:
        return error_response(404, f"{name} has no {'notebook' if NOTEBOOK in kinds else 'terminal'}")
    if key is None and run.user_id != user.id:
        raise Forbidden(f"{name} is {run.user.username}'s: its pages open in its owner's browser "
                        "alone (with an API key, any member of the org reaches it)")
    if key is None and run.kind == NOTEBOOK and not on_notebook_host():
        if request.method != "GET" or "Upgrade" in request.headers:
            raise Forbidden("a notebook's pages open on the site's notebook host alone")
        return _ticket_to_notebook_host(run, user)
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


@bp.get("/runs/<name>/notebook-enter")
def notebook_enter(name: str):
    """On the notebook host: a ticket from the dashboard traded for this
    host's cookie, for the run's path alone."""
    if not on_notebook_host():
        return error_response(404, f"nothing at {request.path}")
    payload = _signed("ticket", request.args.get("ticket", ""), TICKET_SECONDS)
    user = _visitor(payload)
    if user is None or payload is None or payload.get("name") != name:
        return error_response(403, "this link to a notebook has expired or is not yours: open "
                                   "the notebook again from its run's page on the dashboard")
    response = redirect(f"/runs/{name}/notebook/lab")
    response.set_cookie(COOKIE, _signer("cookie").dumps(payload), max_age=COOKIE_SECONDS,
                        path=f"/runs/{name}/notebook/", httponly=True, samesite="Lax",
                        secure=request.scheme == "https")
    return response


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
