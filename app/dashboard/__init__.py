from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import (admin, auth, cluster, logs, runs, schedules,  # noqa: E402,F401
                           settings, spend, telemetry, volumes)
