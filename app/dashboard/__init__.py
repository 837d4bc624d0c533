from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import auth, logs, runs, spend, telemetry, volumes  # noqa: E402,F401
