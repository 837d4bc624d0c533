"""One shape for every API error: {"error": message}, with its status."""
from flask import jsonify
from werkzeug.exceptions import HTTPException

from app.api import bp
from app.services.errors import ServiceError


def error_response(status: int, message: str):
    response = jsonify(error=message)
    response.status_code = status
    return response


@bp.app_errorhandler(HTTPException)
def handle_http_error(exc: HTTPException):
    return error_response(exc.code or 500, exc.description)


@bp.app_errorhandler(ServiceError)
def handle_service_error(exc: ServiceError):
    return error_response(exc.status, exc.message)
