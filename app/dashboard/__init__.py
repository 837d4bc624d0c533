from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import (auth, cluster, logs, runs, schedules, settings,  # noqa: E402,F401
                           spend, telemetry, volumes)
