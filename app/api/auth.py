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
        presented = scheme.lower() == "bearer" and bool(key.strip())
        subject = [f"address {request.remote_addr}"]
        if presented:
            throttle.check(subject)
        row = api_key_for(key.strip()) if presented else None
        if row is None:
            if presented:
                throttle.record_failure(subject, f"a wrong API key ({key_prefix(key.strip())})")
            return error_response(401, "invalid or missing API key")
        g.user, g.api_key = row.user, row
        return view(*args, **kwargs)
    return wrapper
