from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from divergent.app.dashboard import (  # noqa: E402,F401
    admin,
    auth,
    cluster,
    formats,
    interactive,
    logs,
    runs,
    schedules,
    settings,
    spend,
    sso,
    sweeps,
    telemetry,
    volumes,
)
