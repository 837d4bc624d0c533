"""`GET /metrics` for Prometheus (app/services/monitoring.py): for a scrape
token (DIV_METRICS_TOKEN, as `Authorization: Bearer …`), a site admin's
API key, or a site admin signed in to the dashboard. It says how busy
every org is, so nobody else gets it."""
from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.auth import count_wrong_key
from app.dashboard.auth import signed_in_user
from app.services.keys import api_key_for
from app.services.monitoring import exposition
from app.web.errors import error_response

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
def metrics():
    if not _allowed():
        return error_response(401, "metrics are for the site's scrape token or a site admin")
    return Response(exposition(), content_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})


def _allowed() -> bool:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    presented = presented.strip()
    if scheme.lower() == "bearer" and presented:
        token = current_app.config["DIV_METRICS_TOKEN"]
        if token and hmac.compare_digest(presented.encode(), token.encode()):
            return True
        row = api_key_for(presented)
        if row is None:
            count_wrong_key(presented)
        return row is not None and row.user.role == "site_admin"
    user = signed_in_user()
    return user is not None and user.role == "site_admin"
