"""`div login --sso`'s way in: the OAuth device flow with the site's OpenID
Connect provider, through the server, which holds the client's secret
(docs/admins/sso.md). No key is needed to start: the provider's sign-in is
what lets the user in, and its code expires within minutes."""
from __future__ import annotations

from flask import jsonify, request

from divergent.app.api import bp
from divergent.app.services.accounts import sso, throttle
from divergent.app.services.errors import NotFound
from divergent.app.web.request_args import json_object


@bp.post("/auth/device")
def device_start():
    """A device code: the user enters its user_code at verification_uri.
    Each asks the provider, so an address gets as many as wrong passwords
    in a window (DIV_AUTH_MAX_FAILURES a DIV_AUTH_WINDOW)."""
    if not sso.enabled():
        raise NotFound("single sign-on is not set up on this site")
    subject = f"device sign-ins from {request.remote_addr}"
    try:
        throttle.check([subject])
    except throttle.Throttled as exc:
        return jsonify(error=exc.message), 429, exc.headers
    throttle.record_failure(subject, "a device sign-in started", request.remote_addr)
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
