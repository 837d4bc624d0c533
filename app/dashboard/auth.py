"""Sign in and out of the dashboard: username and password (wrong ones
counted and slowed, app/services/accounts/throttle.py), a session cookie (HttpOnly,
SameSite=Lax, Secure where configured), CSRF on every form and HTMX request
(Flask-WTF).

Wrong passwords are counted per username and address, except from a
browser that has signed in as that user before: it carries a device cookie
(signed, a year), and its attempts count on their own. So someone sharing
the user's address (a login node, a NAT) who guesses wrong ten times locks
out only unknown browsers, never the user's own (OWASP's device cookies)."""
from __future__ import annotations

import re
import secrets
from functools import wraps
from typing import cast

from flask import current_app, g, redirect, render_template, request, session, url_for
from itsdangerous import BadSignature, URLSafeSerializer

from divergent.app.dashboard import bp
from divergent.app.models import User
from divergent.app.services.accounts import throttle
from divergent.app.services.accounts.passwords import end_sessions, user_for_password
from divergent.app.services.accounts.sso import sso_name
from divergent.app.services.errors import Forbidden
from divergent.app.web.credentials import signed_in_user

# Where sign-in may send the browser: a path of this site, printable ASCII
# with no backslash, never `//host` (browsers drop tabs and newlines, so
# `/\t/evil.example` would be one).
LOCAL_PATH = re.compile(r"/(?![/\\])[\x21-\x5b\x5d-\x7e]*")


def login_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        user = signed_in_user()
        if user is None:
            return redirect(url_for("dashboard.login", next=request.path))
        g.user = user
        return view(*args, **kwargs)
    return wrapper


def site_admin_required(view):
    """Pages about the whole cluster and every org: site admins only."""
    @wraps(view)
    @login_required
    def wrapper(*args, **kwargs):
        if g.user.role != "site_admin":
            raise Forbidden("Only site admins see this page.")
        return view(*args, **kwargs)
    return wrapper


DEVICE_COOKIE = "div_device"
DEVICE_SECONDS = 365 * 24 * 3600


def _devices() -> URLSafeSerializer:
    # create_app always sets one.
    return URLSafeSerializer(cast("str | bytes", current_app.secret_key), salt="divergent-device")


def _device_subject(username: str) -> str | None:
    """This browser's own throttle subject, when it signed in as `username` before."""
    try:
        known, nonce = _devices().loads(request.cookies.get(DEVICE_COOKIE, ""))
    except (BadSignature, ValueError, TypeError):
        return None
    return f"user {username} device {nonce}" if known == username else None


def _remember_device(response, username: str) -> None:
    value = _devices().dumps([username, secrets.token_hex(8)])
    response.set_cookie(DEVICE_COOKIE, value, max_age=DEVICE_SECONDS, httponly=True,
                        samesite="Lax", secure=current_app.config["SESSION_COOKIE_SECURE"])


@bp.route("/login", methods=["GET", "POST"])
def login():
    error, status = None, 200
    if request.method == "POST":
        username = request.form.get("username", "")[:64].replace("\0", "")
        subject = _device_subject(username) or throttle.user_subject(username,
                                                                     request.remote_addr)
        try:
            throttle.check([subject])
        except throttle.Throttled as exc:
            page, _ = login_page(exc.message)
            return page, 429, exc.headers
        user = user_for_password(username, request.form.get("password", ""))
        if user is None:
            throttle.record_failure(subject, "a wrong password", request.remote_addr)
        else:
            throttle.forget(subject)
            response = signed_in(user, request.args.get("next", ""))
            _remember_device(response, user.username)
            return response
        error, status = "Wrong username or password.", 401
    return login_page(error, status)


def login_page(error: str | None = None, status: int = 200):
    return render_template("login.html", error=error, sso=sso_name()), status


def signed_in(user: User, target: str):
    """A new session for `user` (no fixation: the old one's contents go),
    and the browser sent to `target` if it is a path of this site."""
    session.clear()
    session["user_id"], session["epoch"] = user.id, user.session_epoch
    # Only paths of this site: never an open redirect.
    return redirect(target if LOCAL_PATH.fullmatch(target) else url_for("dashboard.runs"))


@bp.post("/logout")
def logout():
    """Ends this session and every other one of the user's: a copied
    cookie stops working too."""
    user = signed_in_user()
    if user is not None:
        end_sessions(user)
    session.clear()
    return redirect(url_for("dashboard.login"))
