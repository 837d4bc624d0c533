"""The HTTP client of the `div` command: every call to the API goes through
ApiClient, which turns the API's JSON errors into ApiError (the CLI prints the
message as it is and exits 1) and a server it cannot reach into ApiUnreachable."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import requests

CONNECT_TIMEOUT = 5
# Log streams send an event at least every 5 s; silence for longer is a dead peer.
READ_TIMEOUT = 30


class ApiError(Exception):
    """The API answered with an error; the message is the server's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ApiUnreachable(Exception):
    """No answer from the API (refused, reset, timed out, or a 502/503)."""


TRANSIENT = (requests.ConnectionError, requests.Timeout,
             requests.exceptions.ChunkedEncodingError)


class ApiClient:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/") + "/api/v1"
        self.token = token
        self._local = threading.local()

    @property
    def _session(self) -> requests.Session:
        # One session (one connection pool) per thread: uploads run in parallel.
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.headers["Authorization"] = f"Bearer {self.token}"
            session.headers["User-Agent"] = "div-cli"
        return session

    def _request(self, method: str, path: str, **kwargs) -> requests.Response:
        try:
            response = self._session.request(method, self.url + path,
                                             timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), **kwargs)
        except TRANSIENT as exc:
            raise ApiUnreachable(f"cannot reach the API at {self.url}: {_reason(exc)}") from None
        if response.status_code in (502, 503, 504) and "json" not in response.headers.get(
                "Content-Type", ""):
            raise ApiUnreachable(f"the API at {self.url} answered {response.status_code}")
        if response.status_code >= 400:
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = f"the API answered {response.status_code} {response.reason}"
            raise ApiError(response.status_code, message)
        return response

    def get(self, path: str, **params) -> dict:
        return self._request("GET", path, params=params).json()

    def post(self, path: str, body: dict | None = None) -> dict:
        return self._request("POST", path, json=body or {}).json()

    def put_file(self, path: str, file_path: str, size: int) -> None:
        headers = {"Content-Type": "application/octet-stream"}
        with open(file_path, "rb") as f:
            # requests sends a Content-Length from the file's size; an empty
            # file object would go chunked instead, which the server refuses.
            self._request("PUT", path, data=f if size else b"", headers=headers)

    def events(self, path: str, **params) -> Iterator[dict]:
        """An NDJSON stream, one event a line. Raises ApiUnreachable when the
        connection drops, so the caller can resume from its offsets."""
        response = self._request("GET", path, params=params, stream=True)
        try:
            for line in response.iter_lines(chunk_size=64 * 1024):
                if line:
                    yield json.loads(line)
        except TRANSIENT as exc:
            raise ApiUnreachable(f"lost the API at {self.url}: {_reason(exc)}") from None
        finally:
            response.close()


def _reason(exc: Exception) -> str:
    text = str(exc.args[0] if exc.args else exc)
    for known in ("Connection refused", "timed out", "Name or service not known",
                  "Connection reset", "Connection aborted", "IncompleteRead"):
        if known in text:
            return known.lower()
    return type(exc).__name__
