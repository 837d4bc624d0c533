from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import (auth, logs, runs, settings, spend, telemetry,  # noqa: E402,F401
                           volumes)
