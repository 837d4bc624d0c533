"""Sign in and out of the dashboard: username and password, a session
cookie (HttpOnly, SameSite=Lax, Secure where configured), CSRF on every form
and HTMX request (Flask-WTF)."""
from __future__ import annotations

from functools import wraps

from flask import g, redirect, render_template, request, session, url_for

from app.dashboard import bp
from app.extensions import db
from app.models import User
from app.services.errors import Forbidden
from app.services.passwords import user_for_password


def login_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        user = db.session.get(User, session["user_id"]) if "user_id" in session else None
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


@bp.route("/login", methods=["GET", "POST"])
def login():
    error = None
    if request.method == "POST":
        user = user_for_password(request.form.get("username", ""), request.form.get("password", ""))
        if user is not None:
            session.clear()   # a new session on sign-in: no fixation
            session["user_id"] = user.id
            target = request.args.get("next", "")
            # Only paths of this site: never an open redirect.
            return redirect(target if target.startswith("/") and not target.startswith("//")
                            else url_for("dashboard.runs"))
        error = "Wrong username or password."
    return render_template("login.html", error=error), 401 if error else 200


@bp.post("/logout")
def logout():
    session.clear()
    return redirect(url_for("dashboard.login"))
