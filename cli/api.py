"""The HTTP client of the `div` command: every call to the API goes through
ApiClient, which turns the API's JSON errors into ApiError (the CLI prints the
message as it is and exits 1) and a server it cannot reach into ApiUnreachable.

It is the standard library's http.client, not requests: `div` starts for
every run, and requests alone costs about 110 ms of imports, a quarter of
what `div run --detach` takes with unchanged code."""
from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO, NamedTuple, Protocol
from urllib.parse import quote, urlencode, urlsplit

from divergent.cli.net import proxy_for, tls_context

# Log streams send an event at least every 5 s; silence for longer is a dead peer.
TIMEOUT = 30
CHUNK = 1 << 20
DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
# A transfer the server has no slot for (429: the org moves as many files as
# it may at once; 503: the server does) is tried again for this long.
BUSY = (429, 503)
BUSY_SECONDS = 300


class ApiError(Exception):
    """The API answered with an error; the message is the server's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ApiUnreachable(Exception):
    """No answer from the API (refused, reset, timed out, or a bare 502/503)."""


class ApiDropped(ApiUnreachable):
    """The server closed the connection mid-request: a refused upload's body
    is never read, so its 429 may arrive as a reset."""


class ApiClient:
    def __init__(self, url: str, token: str, timeout: float = TIMEOUT):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ApiUnreachable(f"not an http(s) URL: {url!r}")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._base = parts.path.rstrip("/") + "/api/v1"
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": "div-cli",
                         "Accept": "application/json"}
        self._local = threading.local()
        self._timeout = timeout

    def page_url(self, path: str) -> str:
        """A dashboard page: the dashboard is served where the API is."""
        return self.url + path

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": self._headers["Authorization"],
                "User-Agent": self._headers["User-Agent"]}

    def host_header(self) -> str:
        return self._host if self._port is None else f"{self._host}:{self._port}"

    def path_prefix(self) -> str:
        """Where the server is mounted: pages (and a run's terminal) below it."""
        return self._base.removesuffix("/api/v1")

    def new_connection(self) -> http.client.HTTPConnection:
        """To the API, or through a proxy (a CONNECT tunnel), TLS verified."""
        # http.client sends a file body 8 KB a syscall by default.
        options: dict[str, Any] = {"timeout": self._timeout, "blocksize": CHUNK}
        try:
            if self._https:
                options["context"] = tls_context()
            proxy = proxy_for("https" if self._https else "http", self._host)
        except (OSError, ValueError) as exc:     # a CA bundle or proxy URL that is not one
            raise ApiUnreachable(f"cannot reach the API at {self.url}: {exc}") from None
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        if proxy is None:
            return kind(self._host, self._port, **options)
        conn = kind(*proxy, **options)
        conn.set_tunnel(self._host, self._port)
        return conn

    def _send(self, method: str, path: str, params: Mapping[str, object] | None,
              body: bytes | LocalBody | None, headers: dict[str, str],
              fresh: bool, base: str | None = None) -> http.client.HTTPResponse:
        """One request; a kept-alive connection the server has since closed
        is replaced once (one connection per thread: uploads run in parallel)."""
        # Names in the path are the user's words ("a b", "x?y"): quoted here,
        # once for every command, never sent as they are.
        # A volume path is bytes (a run may name a file with any): a name that
        # is not UTF-8 arrives here in PEP 383's form and leaves as its bytes.
        query = {key: value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
                 for key, value in (params or {}).items()}
        target = ((self._base if base is None else base) + quote(path, safe="/")
                  + (f"?{urlencode(query)}" if query else ""))
        for attempt in range(2):
            conn = self.new_connection() if fresh else getattr(self._local, "conn", None)
            reused = conn is not None and not fresh
            if conn is None:
                conn = self._local.conn = self.new_connection()
            try:
                if isinstance(body, LocalBody):
                    _send_file_body(conn, method, target, {**self._headers, **headers}, body)
                else:
                    conn.request(method, target, body=body, headers={**self._headers, **headers})
                return conn.getresponse()
            except DROPPED as exc:
                conn.close()
                self._local.conn = None
                if reused and attempt == 0:
                    continue
                raise ApiDropped(f"cannot reach the API at {self.url}: {_reason(exc)}") from None
            except OSError as exc:
                conn.close()
                self._local.conn = None
                raise ApiUnreachable(f"cannot reach the API at {self.url}: {_reason(exc)}") from None
        raise AssertionError("unreachable")

    def _request(self, method: str, path: str, params: Mapping[str, object] | None = None,
                 body: bytes | LocalBody | None = None, headers: dict[str, str] | None = None,
                 stream: bool = False, base: str | None = None) -> http.client.HTTPResponse:
        response = self._send(method, path, params, body, headers or {}, fresh=stream, base=base)
        if response.status < 400:
            return response
        try:
            raw = response.read()
        except OSError:
            raw = b""
        if response.status in (502, 503, 504) and b'"error"' not in raw:
            raise ApiUnreachable(f"the API at {self.url} answered {response.status}")
        try:
            message = json.loads(raw)["error"]
        except (ValueError, KeyError, TypeError):
            message = f"the API answered {response.status} {response.reason}"
        raise ApiError(response.status, message)

    def _json(self, response: http.client.HTTPResponse) -> dict[str, Any]:
        try:
            answer: dict[str, Any] = json.loads(response.read())    # every answer is an object
            return answer
        except (OSError, http.client.HTTPException) as exc:
            raise ApiUnreachable(f"lost the API at {self.url}: {_reason(exc)}") from None

    def get(self, path: str, params: Mapping[str, object] | None = None) -> dict[str, Any]:
        return self._json(self._request("GET", path, params=params))

    def get_page(self, path: str) -> dict[str, Any]:
        """A GET below the server's root, not the API's (an interactive run's
        own URL), answered in JSON."""
        return self._json(self._request("GET", path, base=self.path_prefix()))

    def _send_json(self, method: str, path: str, body: Mapping[str, object] | None,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        return self._json(self._request(method, path, body=json.dumps(body or {}).encode(),
                                        headers={"Content-Type": "application/json",
                                                 **(headers or {})}))

    def post(self, path: str, body: Mapping[str, object] | None = None,
             headers: dict[str, str] | None = None) -> dict[str, Any]:
        return self._send_json("POST", path, body, headers)

    def put_json(self, path: str, body: Mapping[str, object]) -> dict[str, Any]:
        return self._send_json("PUT", path, body)

    def delete(self, path: str, params: Mapping[str, object] | None = None) -> dict[str, Any]:
        return self._json(self._request("DELETE", path, params=params))

    def _transfer(self, method: str, path: str, params: Mapping[str, object] | None = None,
                  body: bytes | LocalBody | None = None,
                  headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        """A request that moves a file (each may be sent again whole), tried
        again while the server has no slot for it (app/services/site/request_slots.py)."""
        waited_since = time.monotonic()
        while True:
            try:
                return self._request(method, path, params=params, body=body, headers=headers)
            except (ApiError, ApiDropped) as exc:
                busy = isinstance(exc, ApiDropped) or exc.status in BUSY
                if not busy or time.monotonic() - waited_since > BUSY_SECONDS:
                    raise
            time.sleep(1 + random.random() * 2)

    def put_file(self, path: str, file_path: str, size: int,
                 params: Mapping[str, object] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size),
                   **(headers or {})}
        with open(file_path, "rb") as f:
            self._json(self._transfer("PUT", path, params=params, body=LocalBody(f, size),
                                      headers=headers))

    def post_bytes(self, path: str, data: bytes, content_type: str) -> dict[str, Any]:
        return self._json(self._transfer("POST", path, body=data,
                                         headers={"Content-Type": content_type}))

    def download(self, path: str, params: Mapping[str, object], out: Sink, offset: int,
                 progress: Callable[[int], None]) -> tuple[str, int]:
        """Appends the file's bytes from `offset` to `out` (a Range request),
        calling progress(n) as they arrive; returns the whole file's sha256
        and length as the server gave them, for the caller to check: an
        early close reads as the end of the body. A server that sends the
        whole file instead has `out` rewound (seek(0), truncate())."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        response = self._transfer("GET", path, params=params, headers=headers)
        if offset and response.status != 206:
            out.seek(0)     # the server sent the whole file: start over
            out.truncate()
        whole = response.getheader("Content-Range", "").rpartition("/")[2]
        length = int(whole) if whole.isdigit() else int(response.getheader("Content-Length", -1))
        # One buffer for the whole body: readinto() copies from the socket
        # once, where read() would make a new bytes object a chunk.
        view = memoryview(bytearray(CHUNK))
        try:
            while received := response.readinto(view):
                out.write(view[:received])
                progress(received)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiUnreachable(f"lost the API at {self.url}: {_reason(exc)}") from None
        return response.getheader("X-Div-Sha256", ""), length

    def events(self, path: str, params: Mapping[str, object]) -> Iterator[dict[str, Any]]:
        """An NDJSON stream, one event a line, on a connection of its own.
        Raises ApiUnreachable when it drops, so the caller can resume from
        its offsets."""
        response = self._request("GET", path, params=params, stream=True)
        try:
            while line := response.readline():
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException) as exc:
            raise ApiUnreachable(f"lost the API at {self.url}: {_reason(exc)}") from None
        finally:
            response.close()


class Sink(Protocol):
    """Where download() writes: a file, or one that hashes what it is given."""

    def write(self, data: memoryview, /) -> object: ...

    def seek(self, offset: int, /) -> object: ...

    def truncate(self) -> object: ...


class LocalBody(NamedTuple):
    """A request body that is a local file, `size` bytes of it."""
    file: BinaryIO
    size: int


def _send_file_body(conn: http.client.HTTPConnection, method: str, target: str,
                    headers: dict[str, str], body: LocalBody) -> None:
    """The headers, then the file from its start (a resend too): by
    sendfile(2), the kernel moving its pages to the socket without a copy
    through Python; over TLS, which sendfile cannot encrypt, CHUNK at a
    time. Exactly `size` bytes or an error: a file that shrank meanwhile
    would leave the server waiting for the rest."""
    conn.putrequest(method, target)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    body.file.seek(0)
    if isinstance(conn.sock, ssl.SSLSocket):
        sent = 0
        while sent < body.size and (chunk := body.file.read(min(CHUNK, body.size - sent))):
            conn.sock.sendall(chunk)
            sent += len(chunk)
    else:    # sendfile refuses a count of 0: an empty file sends nothing
        sent = conn.sock.sendfile(body.file, offset=0, count=body.size) if body.size else 0
    if sent != body.size:
        conn.close()    # the server's answer would be a wait for the missing bytes
        raise ApiUnreachable(f"{body.file.name} shrank while it was being sent ({sent} of "
                             f"{body.size} bytes); nothing was stored, run the same command again")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, (http.client.RemoteDisconnected, ConnectionResetError)):
        return "connection closed by the server"
    if isinstance(exc, http.client.IncompleteRead):
        return "connection closed mid-answer"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"its TLS certificate is not trusted ({exc.verify_message}): set DIV_CA_BUNDLE "
                "to the CA that signed it")
    return str(exc) or type(exc).__name__
