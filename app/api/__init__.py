from flask import Blueprint

bp = Blueprint("api", __name__)

from app.api import (code, errors, keys, routes, runs, schedules,  # noqa: E402,F401
                     secrets, storage, usage)
