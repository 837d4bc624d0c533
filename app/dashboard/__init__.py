from flask import Blueprint

bp = Blueprint("dashboard", __name__)

from app.dashboard import (auth, cluster, logs, runs, settings, spend,  # noqa: E402,F401
                           telemetry, volumes)
