"""The Orgs page (site admins): every org with its users, this month's
spend and limit; make orgs and users, set limits and prices. The same
services as `flask create-org`, `create-user`, `org-limit` and `prices`."""
from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import site_admin_required
from divergent.app.models import ROLES
from divergent.app.services.accounts.orgs import (
    add_user,
    find_org,
    get_or_create_org,
    org_summaries,
    set_monthly_limit,
    users_by_org,
)
from divergent.app.services.cluster.gpu_use import gpus_in_use
from divergent.app.services.money.pricing import (
    change_prices,
    current_prices,
    format_usd,
    limit_text,
    usd_text,
)


@bp.get("/admin")
@site_admin_required
def admin():
    return render_template("admin.html", orgs=org_summaries(), users=users_by_org(), roles=ROLES,
                           gpu_use=gpus_in_use(),
                           prices=current_prices(), usd=format_usd, usd_text=usd_text)


def _back(message: str):
    flash(message)
    return redirect(url_for("dashboard.admin"))


@bp.post("/admin/orgs")
@site_admin_required
def admin_create_org():
    org = get_or_create_org(request.form.get("name", "").strip())
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
    org = set_monthly_limit(find_org(name), request.form.get("limit", ""))
    return _back(f"{org.name}: {limit_text(org.monthly_limit_micros)} a month.")


@bp.post("/admin/prices")
@site_admin_required
def admin_prices():
    change_prices({name.removeprefix("price_"): value for name, value in request.form.items()
                   if name.startswith("price_") and value.strip()})
    return _back("Prices saved: new runs use them; a run keeps the rate it started with.")
