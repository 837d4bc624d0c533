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
from app.services.errors import Invalid
from app.services.orgs import InvalidName, add_user, find_org, get_or_create_org
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
    org = find_org(request.form.get("org", ""))
    user = add_user(org, request.form.get("username", "").strip(),
                    request.form.get("role", "member"))
    return _back(f"User {user.username} is in {org.name} ({user.role}); "
                 f"set a password with `flask set-password {user.username}`.")


@bp.post("/admin/orgs/<name>/limit")
@site_admin_required
def admin_org_limit(name: str):
    org = find_org(name)
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
