"""Every error, app-wide, in one place: the API answers {"error": message}
with its status, the dashboard an HTML page with the same message. The
services raise ServiceError subclasses (app/services/errors.py) and nothing
else for what a user did; the rest here is the site's trouble, said plainly."""
from typing import cast

from flask import Flask, current_app, jsonify, render_template, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from divergent.app.extensions import db
from divergent.app.services.errors import ServiceError
from divergent.app.web.credentials import bearer_key
from divergent.app.web.upload_body import abandon_large_body


def init_app(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_http_error)
    app.register_error_handler(OperationalError, handle_database_error)
    app.register_error_handler(PermissionError, handle_share_refusal)
    app.register_error_handler(ServiceError, handle_service_error)


def error_response(status: int, message: str, headers: dict | None = None):
    abandon_large_body(request)
    if not request.path.startswith("/api/") and bearer_key() is None:
        # The dashboard's pages get a page, not JSON; a request with an API
        # key (a script on a notebook's REST API) gets JSON wherever it went.
        return render_template("error.html", status=status, message=message), status, headers
    response = jsonify(error=message)
    response.status_code = status
    response.headers.update(headers or {})
    return response


def handle_http_error(exc: HTTPException):
    if exc.code == 404 and request.url_rule is None:
        return error_response(404, _nothing_at(request.path))
    # Every werkzeug error Flask hands here (one with a code) has a description.
    return error_response(exc.code or 500, cast(str, exc.description))


def _nothing_at(path: str) -> str:
    """An address no route has, said so that a client set up with the
    wrong one (DIV_API_URL=https://host/api) knows what to change."""
    doubled = path.startswith("/api/") and "/api/v1/" in path[len("/api/v1"):]
    if path.startswith("/api/") and (doubled or not path.startswith("/api/v1/")):
        return (f"nothing at {path}: the API is under /api/v1/, and the CLI's API URL "
                "(DIV_API_URL, --api-url) is the server's address without /api")
    return f"nothing at {path}"


def handle_database_error(exc: OperationalError):
    """The database gone or unwritable (a full disk, a server restarting) is
    the service being unavailable, not a bug: nothing was changed."""
    db.session.rollback()
    current_app.logger.error("database: %s", exc.orig)
    return error_response(503, "the database is not available right now; nothing was "
                               "changed, try again in a moment", {"Retry-After": "5"})


def handle_share_refusal(exc: PermissionError):
    """A share folder the service user may not write (made by root, say) is
    the site's to fix, not a bug in the request. What the request began in
    the database is undone, as for any other error."""
    db.session.rollback()
    current_app.logger.error("the share refused the server: %s", exc)
    return error_response(503, "the share refused the server (permission denied); an admin "
                               "must check who owns the data folder", {"Retry-After": "60"})


def handle_service_error(exc: ServiceError):
    return error_response(exc.status, exc.message, exc.headers)
