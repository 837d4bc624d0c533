"""Bearer-token auth for the API: the CLI sends its key as
`Authorization: Bearer div_…`."""
from __future__ import annotations

from functools import wraps

from flask import g, request

from app.api.errors import error_response
from app.services.keys import user_for_key


def token_required(view):
    @wraps(view)
    def wrapper(*args, **kwargs):
        header = request.headers.get("Authorization", "")
        scheme, _, key = header.partition(" ")
        user = user_for_key(key.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            return error_response(401, "invalid or missing API key")
        g.user = user
        return view(*args, **kwargs)
    return wrapper
