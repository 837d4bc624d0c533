"""Views that hold a worker thread for as long as a client makes them take
a slot of their kind (app/services/request_slots.py) for the signed-in
user's org, given back once the response has been sent (or given up)."""
from __future__ import annotations

from functools import wraps

from flask import g, make_response

from app.services.request_slots import Kind, take_slot


def holding_slot(kind: Kind):
    def decorate(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            give_back = take_slot(kind, g.user.org_id)
            try:
                response = make_response(view(*args, **kwargs))
            except BaseException:
                give_back()
                raise
            response.call_on_close(give_back)
            return response
        return wrapper
    return decorate
