"""Bearer-token auth for the API: the CLI sends its key as
`Authorization: Bearer div_…`. A right key is always served; wrong ones are
counted per key prefix and answered 429 past the limit (app/services/
throttle.py). That slows no guess of a key's 256 random bits, which is
hopeless anyway; it keeps the log and the failure table from growing with
every wrong key and tells a misconfigured client to stop."""
from __future__ import annotations

from functools import wraps

from flask import g, request

from app.services import throttle
from app.services.keys import api_key_for, key_prefix
from app.web.errors import error_response


def token_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            return error_response(401, "invalid or missing API key")
        row = api_key_for(key)
        if row is None:
            count_wrong_key(key)
            return error_response(401, "invalid or missing API key")
        g.user, g.api_key = row.user, row
        return view(*args, **kwargs)
    return wrapper


def count_wrong_key(key: str) -> None:
    """A wrong key is counted against the key it names (or the address);
    past the limit, throttle.check answers 429."""
    prefix = key_prefix(key)
    subject = throttle.key_subject(prefix, request.remote_addr)
    throttle.check([subject])
    throttle.record_failure(subject, f"a wrong API key ({prefix})", request.remote_addr)
