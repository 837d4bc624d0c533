"""`GET /metrics` for Prometheus (app/services/cluster/monitoring.py): for a scrape
token (DIV_METRICS_TOKEN, as `Authorization: Bearer …`), a site admin's
API key, or a site admin signed in to the dashboard. It says how busy
every org is, so nobody else gets it."""
from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST

from divergent.app.services.accounts import throttle
from divergent.app.services.accounts.keys import key_prefix
from divergent.app.services.cluster.monitoring import exposition
from divergent.app.web.credentials import bearer_key, key_row, signed_in_user

bp = Blueprint("metrics", __name__)


# A scrape token shorter than this is refused when the app starts: it
# could be guessed.
MIN_TOKEN_LENGTH = 32


@bp.get("/metrics")
def metrics():
    if not _allowed():
        # Plain text for a scraper, as its answers are.
        return Response("metrics are for the site's scrape token or a site admin\n", 401,
                        content_type="text/plain; charset=utf-8")
    return Response(exposition(), content_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})


def _allowed() -> bool:
    presented = bearer_key()
    if presented:
        # An address (or key) past its wrong tries gets 429, whatever it sends now.
        throttle.check([throttle.key_subject(key_prefix(presented), request.remote_addr)])
        token = current_app.config["DIV_METRICS_TOKEN"]
        if token and hmac.compare_digest(presented.encode(), token.encode()):
            return True
        row = key_row(presented)
        return row is not None and row.user.role == "site_admin"
    user = signed_in_user()
    return user is not None and user.role == "site_admin"


def check_token(config) -> None:
    token = config.get("DIV_METRICS_TOKEN") or ""
    if token and len(token) < MIN_TOKEN_LENGTH:
        raise RuntimeError(f"DIV_METRICS_TOKEN must be at least {MIN_TOKEN_LENGTH} characters "
                           "(make one with: openssl rand -hex 32)")
