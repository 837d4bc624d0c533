"""Domain errors the services raise; app/api maps each to one JSON response.
The message is for the user: the CLI prints it as it is."""
from __future__ import annotations


class ServiceError(Exception):
    status = 400
    headers: dict[str, str] = {}

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Invalid(ServiceError):
    """A request value the server will not accept."""


class Forbidden(ServiceError):
    """Signed in, but not allowed: a page for site admins, say."""
    status = 403


class NotFound(ServiceError):
    status = 404


class Conflict(ServiceError):
    status = 409


class Refused(ServiceError):
    """Slurm will not run it as asked."""
    status = 422


class TooManySubmits(ServiceError):
    """An org started as many runs as it may in a while: try again later."""
    status = 429
    headers = {"Retry-After": "60"}


class Unavailable(ServiceError):
    """Slurm or the share did not answer; trying again later may work."""
    status = 503
