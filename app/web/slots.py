"""Views that hold a worker thread for as long as a client makes them take
a slot of their kind (app/services/site/request_slots.py) for the signed-in
user's org, given back once the response has been sent (or given up)."""
from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from flask import Response, g, make_response

from divergent.app.services.site.request_slots import Kind, take_slot


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
            when_sent(response, give_back)
            return response
        return wrapper
    return decorate


def when_sent(response: Response, callback: Callable[[], None]) -> None:
    """`callback` once the server is done with the response. Werkzeug hands
    a direct_passthrough response's body (send_file's file wrapper) to the
    server as it is, so Response.close, and with it call_on_close, never
    runs for it: every file download would keep its slot for good. The
    server closes that body, so the callback rides on its close (gunicorn
    still sends the file with sendfile); `callback` must be idempotent."""
    response.call_on_close(callback)
    body = response.response
    if not response.direct_passthrough or isinstance(body, (list, tuple, bytes, str)):
        return
    close = getattr(body, "close", None)

    def closed() -> None:
        try:
            if close is not None:
                close()
        finally:
            callback()
    body.close = closed  # type: ignore[union-attr]  # set on this body itself, whatever its type
