"""The org's secrets: set (PUT, the value in the body), list (names, who set
them, when), delete. No answer ever holds a value."""
from __future__ import annotations

from flask import g, jsonify, request

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.models import iso_utc
from divergent.app.services.accounts.secrets import check_secret_name, delete_secret, secrets_of, set_secret
from divergent.app.services.errors import Invalid


def _secret_json(row) -> dict:
    return {"name": row.name, "set_by": row.set_by.username,
            "set_at": iso_utc(row.set_at)}


@bp.get("/secrets")
@token_required
def secrets_list():
    return jsonify(secrets=[_secret_json(row) for row in secrets_of(g.user.org)])


@bp.put("/secrets/<name>")
@token_required
def secrets_set(name: str):
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise Invalid('send {"value": "..."}')
    return jsonify(secret=_secret_json(set_secret(g.user, check_secret_name(name),
                                                  body.get("value"))))


@bp.delete("/secrets/<name>")
@token_required
def secrets_delete(name: str):
    delete_secret(g.user.org, name)
    return jsonify(deleted=name)
