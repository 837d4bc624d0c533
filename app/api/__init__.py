from flask import Blueprint

bp = Blueprint("api", __name__)

from app.api import code, errors, routes, runs, storage, usage  # noqa: E402,F401
