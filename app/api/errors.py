"""One shape for every API error: {"error": message}, with its status."""
from flask import jsonify, render_template, request
from werkzeug.exceptions import HTTPException

from app.api import bp
from app.services.errors import ServiceError


def error_response(status: int, message: str, headers: dict | None = None):
    if not request.path.startswith("/api/"):
        # The dashboard's pages get a page, not JSON.
        return render_template("error.html", status=status, message=message), status, headers
    response = jsonify(error=message)
    response.status_code = status
    response.headers.update(headers or {})
    return response


@bp.app_errorhandler(HTTPException)
def handle_http_error(exc: HTTPException):
    return error_response(exc.code or 500, exc.description)


@bp.app_errorhandler(ServiceError)
def handle_service_error(exc: ServiceError):
    return error_response(exc.status, exc.message, exc.headers)
