from flask import g, jsonify

from divergent.app.api import bp
from divergent.app.api.auth import token_required
from divergent.app.services.money.catalog import catalog_json


@bp.get("/health")
def health():
    return jsonify(ok=True)


@bp.get("/catalog")
@token_required
def catalog():
    """The GPU types, GPUs per node and a node's cores and GiB: what `div`
    validates its flags against before uploading."""
    return jsonify(catalog_json())


@bp.get("/whoami")
@token_required
def whoami():
    return jsonify(user=g.user.username, org=g.user.org.name, role=g.user.role,
                   key=g.api_key.prefix)
