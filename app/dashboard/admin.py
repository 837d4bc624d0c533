"""The Orgs page (site admins): every org with its users, this month's
spend and limit; make orgs and users, set limits and prices. The same as
`flask create-org`, `create-user`, `org-limit` and `prices`."""
from __future__ import annotations

import sqlalchemy as sa
from flask import current_app, flash, redirect, render_template, request, url_for

from app.dashboard import bp
from app.dashboard.auth import site_admin_required
from app.extensions import db
from app.models import ROLES, Org, User
from app.services.errors import Invalid, NotFound
from app.services.orgs import InvalidName, get_or_create_org, get_or_create_user
from app.services.pricing import format_usd, monthly_limit, save_prices, usd_text, with_prices
from app.services.runs import current_prices
from app.services.usage import month_spend


@bp.get("/admin")
@site_admin_required
def admin():
    orgs = list(db.session.execute(sa.select(Org).order_by(Org.name)).scalars())
    users = db.session.execute(sa.select(User, Org.name).join(Org, User.org_id == Org.id)
                               .order_by(Org.name, User.username)).all()
    return render_template("admin.html", orgs=[(org, month_spend(org)) for org in orgs],
                           users=users, roles=ROLES, prices=current_prices(), usd=format_usd,
                           usd_text=usd_text)


def _org(name: str) -> Org:
    org = db.session.execute(sa.select(Org).filter_by(name=name)).scalar_one_or_none()
    if org is None:
        raise NotFound(f"no org named {name!r}")
    return org


def _back(message: str):
    flash(message)
    return redirect(url_for("dashboard.admin"))


@bp.post("/admin/orgs")
@site_admin_required
def admin_create_org():
    try:
        org = get_or_create_org(request.form.get("name", "").strip())
    except InvalidName as exc:
        raise Invalid(str(exc)) from None
    return _back(f"Org {org.name} is there (Slurm account {org.slurm_account}).")


@bp.post("/admin/users")
@site_admin_required
def admin_create_user():
    org, role = _org(request.form.get("org", "")), request.form.get("role", "member")
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}")
    try:
        user = get_or_create_user(org, request.form.get("username", "").strip(), role=role)
    except InvalidName as exc:
        raise Invalid(str(exc)) from None
    if user.org_id != org.id:
        raise Invalid(f"{user.username} belongs to another org")
    return _back(f"User {user.username} is in {org.name} ({user.role}); "
                 f"set a password with `flask set-password {user.username}`.")


@bp.post("/admin/orgs/<name>/limit")
@site_admin_required
def admin_org_limit(name: str):
    org = _org(name)
    try:
        org.monthly_limit_micros = monthly_limit(request.form.get("limit", ""))
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    db.session.commit()
    shown = "no limit" if org.monthly_limit_micros is None else format_usd(org.monthly_limit_micros)
    return _back(f"{org.name}: {shown} a month.")


@bp.post("/admin/prices")
@site_admin_required
def admin_prices():
    changes = {name.removeprefix("price_"): value for name, value in request.form.items()
               if name.startswith("price_") and value.strip()}
    try:
        table = with_prices(current_prices(), changes)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    save_prices(current_app.config["DIV_PRICES_FILE"], table)
    return _back("Prices saved: new runs use them; a run keeps the rate it started with.")
