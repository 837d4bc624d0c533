from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import admin, auth, cluster, logs, runs, schedules, settings, spend, telemetry, volumes  # noqa: E402,F401
