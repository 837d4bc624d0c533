"""Every error, app-wide, in one place: the API answers {"error": message}
with its status, the dashboard an HTML page with the same message. The
services raise ServiceError subclasses (app/services/errors.py) and nothing
else for what a user did; the rest here is the site's trouble, said plainly."""
from flask import Flask, current_app, jsonify, render_template, request
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from app.extensions import db
from app.services.errors import ServiceError


def init_app(app: Flask) -> None:
    app.register_error_handler(HTTPException, handle_http_error)
    app.register_error_handler(OperationalError, handle_database_error)
    app.register_error_handler(PermissionError, handle_share_refusal)
    app.register_error_handler(ServiceError, handle_service_error)


def error_response(status: int, message: str, headers: dict | None = None):
    if not request.path.startswith("/api/"):
        # The dashboard's pages get a page, not JSON.
        return render_template("error.html", status=status, message=message), status, headers
    response = jsonify(error=message)
    response.status_code = status
    response.headers.update(headers or {})
    return response


def handle_http_error(exc: HTTPException):
    return error_response(exc.code or 500, exc.description)


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
