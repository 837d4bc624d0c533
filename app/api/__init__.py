from flask import Blueprint

bp = Blueprint("api", __name__)

from divergent.app.api import (  # noqa: E402,F401
    code,
    keys,
    notify,
    openapi,
    routes,
    runs,
    schedules,
    secrets,
    sso,
    storage,
    sweeps,
    transfers,
    usage,
)
