"""Settings: the user's API keys (create, shown once; revoke), the org's
notification channels with their last delivery and error, and its members."""
from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for

from divergent.app.dashboard import bp
from divergent.app.dashboard.auth import login_required
from divergent.app.services.accounts.keys import create_key, keys_of, revoke_key
from divergent.app.services.accounts.orgs import members_of
from divergent.app.services.errors import NotFound
from divergent.app.services.notify.notices import channels_of


def _settings_page(new_key: str | None = None):
    return render_template("settings.html", keys=keys_of(g.user), members=members_of(g.user.org_id),
                           channels=channels_of(g.user.org), new_key=new_key)


@bp.get("/settings")
@login_required
def settings():
    return _settings_page()


@bp.post("/settings/keys")
@login_required
def settings_create_key():
    name = request.form.get("name", "").strip()[:64]
    # Rendered, not redirected: the key is shown this once and never stored plain.
    return _settings_page(new_key=create_key(g.user, name=name or "dashboard"))


@bp.post("/settings/keys/<prefix>/revoke")
@login_required
def settings_revoke_key(prefix: str):
    if not revoke_key(g.user, prefix):
        raise NotFound(f"no live key {prefix}")
    flash(f"Key {prefix} revoked: it stops working at once.")
    return redirect(url_for("dashboard.settings"))
