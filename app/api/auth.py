"""Bearer-token auth for the API: the CLI sends its key as
`Authorization: Bearer div_…`. Wrong keys are counted per client address
and slowed (app/services/throttle.py)."""
from __future__ import annotations

from functools import wraps

from flask import g, request

from app.api.errors import error_response
from app.services import throttle
from app.services.keys import api_key_for, key_prefix


def token_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            return error_response(401, "invalid or missing API key")
        address = throttle.subjects()
        throttle.check(address)
        row = api_key_for(key)
        if row is None:
            throttle.record_failure(address, f"a wrong API key ({key_prefix(key)})")
            return error_response(401, "invalid or missing API key")
        g.user, g.api_key = row.user, row
        return view(*args, **kwargs)
    return wrapper
