from flask import g, jsonify

from app.api import bp
from app.api.auth import token_required


@bp.get("/health")
def health():
    return jsonify(ok=True)


@bp.get("/whoami")
@token_required
def whoami():
    return jsonify(user=g.user.username, org=g.user.org.name, role=g.user.role,
                   key=g.api_key.prefix)
