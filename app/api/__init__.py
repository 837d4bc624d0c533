from flask import Blueprint

bp = Blueprint("api", __name__)

from app.api import code, keys, routes, runs, schedules, secrets, storage, transfers, usage  # noqa: E402,F401
