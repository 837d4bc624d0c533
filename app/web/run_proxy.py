"""The server's one way into an interactive run (div shell, div notebook):
HTTP and WebSockets passed to what serves the run on its job's address
(app/services/runs/interactive.py), the address the server works out
itself: a request names a run, never a host or a port.

Nothing of the user's credentials goes on to the run, which runs the org's
own code: the API key (Authorization) and every cookie of this site are
dropped, and the run's own token is added (Authorization for Jupyter,
X-Divergent-Token for the terminal). Answers come back without cookies of
their own, so that a run can never set one on this site.

A WebSocket is spliced byte for byte once the run has said 101, on the
worker thread that took it (app/web/gunicorn_worker.py lets such a
connection go without writing an answer), for as long as the run is
running; each holds an interactive slot of its org's
(app/services/site/request_slots.py), as every proxied request does."""
from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import quote

from flask import Response, request, stream_with_context

from divergent.app.extensions import db
from divergent.app.models import Run
from divergent.app.services.errors import Invalid, Unavailable
from divergent.app.services.runs.interactive import Upstream, upstream

# What the worker reads in the request's environ: a connection spliced to a
# run, which it closes without writing an answer.
SPLICED = "divergent.spliced"
CONNECT_SECONDS = 5
ANSWER_SECONDS = 60
HEAD_LIMIT = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
CHUNK = 64 * 1024
# How often a spliced connection asks whether its run still runs; how much
# it holds for a side that is slow to take it, and for how long.
LIVE_CHECK_SECONDS = 10
HELD = 1 << 20
STALL_SECONDS = 60
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "transfer-encoding", "upgrade", "content-length"}
# Never passed on: this site's credentials, and what would name a run's
# origin other than the browser's.
DROPPED_REQUEST = {*HOP_BY_HOP, "cookie", "authorization", "x-divergent-token", "forwarded",
                   "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"}
# A run sets no cookie of this site's and no service worker over its pages.
DROPPED_ANSWER = {*HOP_BY_HOP, "set-cookie", "service-worker-allowed"}


def _headers_for(up: Upstream) -> list[tuple[str, str]]:
    headers = [(name, value) for name, value in request.headers.items()
               if name.lower() not in DROPPED_REQUEST]
    return headers + [("Authorization", f"token {up.token}"), ("X-Divergent-Token", up.token)]


def _target() -> str:
    """The path as the client sent it (Jupyter's %2F in a file's name stays
    one), never an absolute URI's host."""
    query = request.query_string.decode("latin-1")
    raw = request.environ.get("RAW_URI", "").split("?", 1)[0]
    path = raw if raw.startswith("/") and not raw.startswith("//") else quote(request.path)
    return path + (f"?{query}" if query else "")


def _connect(up: Upstream) -> socket.socket:
    try:
        sock = socket.create_connection((up.address, up.port), timeout=CONNECT_SECONDS)
    except OSError as exc:
        raise Unavailable(f"the run does not answer yet ({exc.strerror or exc}); "
                          "try again in a few seconds") from None
    sock.settimeout(ANSWER_SECONDS)
    # A node that dies without a word ends the connection within a minute.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 20)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    return sock


def proxy(run: Run, give_back: Callable[[], None]) -> Response:
    """The run's answer to this request; the slot goes back when it is sent."""
    try:
        up = upstream(run)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return _splice(run, up, give_back)
        return _forward(up, give_back)
    except BaseException:
        give_back()
        raise


def _body_length() -> int:
    length = request.content_length
    if length is None:
        if request.headers.get("Transfer-Encoding"):
            raise Invalid("send a body with Content-Length")
        return 0
    if length > MAX_BODY:
        raise Invalid(f"a request to a run may carry at most {MAX_BODY >> 20} MiB")
    return length


def _forward(up: Upstream, give_back: Callable[[], None]) -> Response:
    length = _body_length()
    conn = http.client.HTTPConnection(up.address, up.port, timeout=ANSWER_SECONDS,
                                      blocksize=CHUNK)
    try:
        conn.sock = _connect(up)
        conn.putrequest(request.method, _target(), skip_host=True, skip_accept_encoding=True)
        for name, value in _headers_for(up):
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        if length:
            # Passed on as it arrives, a chunk at a time: never held whole.
            conn.send(request.stream)
        answer = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise Unavailable(f"the run did not answer: {exc}") from None
    headers = [(name, value) for name, value in answer.getheaders()
               if name.lower() not in DROPPED_ANSWER]

    def chunks() -> Iterator[bytes]:
        try:
            while chunk := answer.read1(CHUNK):
                yield chunk
        except (OSError, http.client.HTTPException):
            return
        finally:
            conn.close()
    # No database connection held while the answer streams.
    db.session.rollback()
    response = Response(stream_with_context(chunks()), status=answer.status, headers=headers)
    response.call_on_close(give_back)
    return response


def _splice(run: Run, up: Upstream, give_back: Callable[[], None]) -> Response:
    client = request.environ.get("gunicorn.socket")
    if client is None:
        raise Unavailable("this server cannot hold WebSockets: run it under gunicorn")
    sock = _connect(up)
    head = [f"GET {_target()} HTTP/1.1", "Connection: Upgrade", "Upgrade: websocket",
            *(f"{name}: {value}" for name, value in _headers_for(up))]
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        answer = _answer_head(sock)
    except OSError as exc:
        sock.close()
        raise Unavailable(f"the run did not answer: {exc}") from None
    if answer is None:
        sock.close()
        raise Unavailable("the run refused the connection")
    request.environ[SPLICED] = True
    run_id = run.id
    # No database connection held for the connection's life.
    db.session.rollback()
    try:
        client.sendall(answer)
        _relay(client, sock, run_id)
    except OSError:
        pass
    finally:
        sock.close()
        give_back()
    return Response(status=101)


# What a run's 101 may say to the browser: the upgrade itself, nothing else
# (never a cookie, however the run spells its lines).
SWITCHING = re.compile(r"HTTP/1\.1 101( [\x20-\x7e]*)?")
UPGRADE_HEADERS = ("upgrade", "connection", "sec-websocket-accept", "sec-websocket-protocol",
                   "sec-websocket-extensions")


def _answer_head(sock: socket.socket) -> bytes | None:
    """The run's answer to the upgrade, made again from the headers an
    upgrade needs, and any bytes after it; None for anything but a 101."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(CHUNK)
        if not chunk or len(data) > HEAD_LIMIT:
            raise OSError("no answer")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    status, *lines = head.decode("latin-1").replace("\r", "").split("\n")
    if not SWITCHING.fullmatch(status):
        return None
    kept = [f"{name.strip()}: {value.strip()}" for name, _, value in
            (line.partition(":") for line in lines)
            if name.strip().lower() in UPGRADE_HEADERS and value.isprintable()]
    return "\r\n".join(["HTTP/1.1 101 Switching Protocols", *kept, "", ""]).encode("latin-1") + rest


def _relay(client: socket.socket, run_sock: socket.socket, run_id: int) -> None:
    """Bytes both ways until either side closes, the run ends, or a side
    takes nothing for STALL_SECONDS. Never blocked on one side: each
    direction holds at most HELD bytes, and a full one stops reading."""
    other = {client: run_sock, run_sock: client}
    held = {client: b"", run_sock: b""}          # bytes waiting to be written to that socket
    for sock in other:
        sock.setblocking(False)
    checked = progressed = time.monotonic()
    while True:
        reading = [s for s in other if len(held[other[s]]) < HELD]
        writing = [s for s in other if held[s]]
        readable, writable, _ = select.select(reading, writing, [], LIVE_CHECK_SECONDS)
        now = time.monotonic()
        for sock in writable:
            with contextlib.suppress(BlockingIOError):
                sent = sock.send(held[sock])
                held[sock] = held[sock][sent:]
                progressed = now
        for sock in readable:
            data = sock.recv(CHUNK)
            if not data:
                return
            held[other[sock]] += data
        if readable:
            progressed = now
        if any(held.values()) and now - progressed > STALL_SECONDS:
            return
        if now - checked >= LIVE_CHECK_SECONDS:
            checked = now
            if not _still_running(run_id):
                return


def _still_running(run_id: int) -> bool:
    try:
        return db.session.scalar(db.select(Run.status).where(Run.id == run_id)) == "running"
    finally:
        db.session.rollback()
