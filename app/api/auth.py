"""Bearer-token auth for the API: the CLI sends its key as
`Authorization: Bearer div_…`. A right key is always served; wrong ones are
counted per key prefix and answered 429 past the limit (app/web/
credentials.py). That slows no guess of a key's 256 random bits, which is
hopeless anyway; it keeps the log and the failure table from growing with
every wrong key and tells a misconfigured client to stop."""
from __future__ import annotations

from functools import wraps

from flask import g

from divergent.app.web.credentials import bearer_key, key_row
from divergent.app.web.errors import error_response


def token_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        key = bearer_key()
        row = key_row(key) if key else None
        if row is None:
            return error_response(401, "invalid or missing API key")
        g.user, g.api_key = row.user, row
        return view(*args, **kwargs)
    return wrapper
