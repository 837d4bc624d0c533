"""Your API keys: list (prefix, name, created, last used, revoked), create
(the key is in this one answer only), revoke (it stops working at once).
Org admins can list and revoke every key of their org."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.models import iso_utc
from divergent.app.services.accounts.keys import create_key, key_prefix, keys_of, revoke_key
from divergent.app.services.errors import Invalid, NotFound


@bp.get("/keys")
@token_required
def keys_list():
    """?all=1: an org admin sees every key of the org."""
    whole_org = request.args.get("all", "") in ("1", "true")
    return jsonify(keys=[{"prefix": key.prefix, "name": key.name, "user": key.user.username,
                          "created_at": iso_utc(key.created_at),
                          "last_used_at": iso_utc(key.last_used_at),
                          "revoked_at": iso_utc(key.revoked_at),
                          "expires_at": iso_utc(key.expires_at),
                          "current": key.id == g.api_key.id}
                         for key in keys_of(g.user, whole_org)])


@bp.post("/keys")
@token_required
def keys_create():
    body = request.get_json(silent=True) if request.get_data() else {}
    if not isinstance(body, dict):
        # A body that asked for an expiry must never make a key without one.
        raise Invalid("send the key's settings as a JSON object (or no body)")
    key = create_key(g.user, name=body.get("name", ""), expires_in_days=body.get("expires_in_days"))
    return jsonify(key=key, prefix=key_prefix(key)), 201


@bp.delete("/keys/<prefix>")
@token_required
def keys_revoke(prefix: str):
    if not revoke_key(g.user, prefix):
        raise NotFound(f"you have no key {prefix!r} that is not revoked")
    return jsonify(revoked=prefix)
