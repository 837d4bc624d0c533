"""`div login --sso`'s way in: the OAuth device flow with the site's OpenID
Connect provider, through the server, which holds the client's secret
(docs/admins/sso.md). No key is needed to start: the provider's sign-in is
what lets the user in, and its code expires within minutes."""
from __future__ import annotations

from flask import jsonify

from divergent.app.api import bp
from divergent.app.services.accounts import sso
from divergent.app.web.request_args import json_object


@bp.post("/auth/device")
def device_start():
    """A device code: the user enters its user_code at verification_uri."""
    return jsonify(sso.start_device_sign_in())


@bp.post("/auth/device/token")
def device_token():
    """The API key once the user signed in at the provider; 202 with the
    seconds to wait before asking again until then."""
    body = json_object()
    try:
        user, key = sso.finish_device_sign_in(body.get("device_code"), str(body.get("host", ""))[:40])
    except sso.StillWaiting as waiting:
        return jsonify(pending=True, interval=waiting.interval), 202
    return jsonify(key=key, user=user.username, org=user.org.name, role=user.role)
