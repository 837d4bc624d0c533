"""An upload's body, read within its deadline: the whole body within
`seconds` (the 5 minutes a file is allowed) and no read waiting longer
than DIV_CLIENT_IDLE_SECONDS, so a client that stalls, or trickles a byte
at a time, holds a worker thread for that long at most. Under gunicorn the
socket's own timeout is set before each read; under any other server (the
tests' in-process one) the stream is read as it is.

A file's body is read from the connection itself under gunicorn. Through
the public path (werkzeug's stream over gunicorn's body reader over its
socket reader) every byte is copied three or four times while the worker
holds the GIL: a fifth of the server's CPU on a 1 GiB put, measured with
perf, where recv_into one buffer copies it once."""
from __future__ import annotations

import io
import socket
import time

from flask import Request, current_app
from gunicorn.http.body import Body, LengthReader
from werkzeug.exceptions import ClientDisconnected

from divergent.app.services.errors import Invalid


class Deadline:
    """When the body must be in, and how long one read may wait, applied to
    the client's socket around each read."""

    def __init__(self, sock: socket.socket | None, seconds: float, body):
        self.sock, self.seconds, self.body = sock, seconds, body
        self.ends = time.monotonic() + seconds
        self.idle = current_app.config["DIV_CLIENT_IDLE_SECONDS"]

    def read(self, call, *args):
        if self.sock is None:
            return call(*args)
        left = self.ends - time.monotonic()
        if left <= 0:
            self._give_up(f"the upload must finish within {self.seconds / 60:g} minutes")
        try:
            self.sock.settimeout(min(self.idle, left))
            return call(*args)
        except TimeoutError:
            if left <= self.idle:
                self._give_up(f"the upload must finish within {self.seconds / 60:g} minutes")
            self._give_up(f"the upload sent nothing for {self.idle:g} s")
        finally:
            self.sock.settimeout(None)

    def _give_up(self, message: str):
        # Where the next request on the connection starts is unknown: it closes.
        self.body.failed = True
        raise Invalid(message)


# gunicorn drains at most this much of a body the view did not read before
# it serves the connection's next request, waiting up to 5 s for it.
DRAINED_BYTES = 64 * 1024


def abandon_large_body(request: Request) -> None:
    """A refused request's body is never read: past what gunicorn would
    drain, the connection closes after the answer instead of waiting 5 s for
    bytes a stalled client never sends (app/web/gunicorn_worker.py)."""
    body = request.environ.get("wsgi.input")
    if isinstance(body, Body) and (request.content_length or 0) > DRAINED_BYTES:
        body.failed = True


def upload_body(request: Request, seconds: float):
    """A file's body: something with readinto(buffer) -> int, ending at the
    body's end."""
    body = request.environ.get("wsgi.input")
    reader = getattr(body, "reader", None)
    if not isinstance(body, Body) or not isinstance(reader, LengthReader):
        return request.stream
    deadline = Deadline(request.environ.get("gunicorn.socket"), seconds, body)
    unreader = reader.unreader
    untouched = body.buf.tell() == 0 and reader.length == request.content_length
    if not untouched or not isinstance(getattr(unreader, "buf", None), io.BytesIO) \
            or not hasattr(unreader, "sock"):
        return TimedStream(request.stream, deadline)
    return SocketBody(body, reader, deadline)


def bounded_stream(request: Request, seconds: float):
    """The request's stream, with read(n), within the deadline."""
    body = request.environ.get("wsgi.input")
    if not isinstance(body, Body):
        return request.stream
    return TimedStream(request.stream, Deadline(request.environ.get("gunicorn.socket"),
                                                seconds, body))


class TimedStream:
    def __init__(self, stream, deadline: Deadline):
        self._stream, self._deadline = stream, deadline

    def read(self, size: int = -1) -> bytes:
        return self._deadline.read(self._stream.read, size)

    def readinto(self, buffer) -> int:
        return self._deadline.read(self._stream.readinto, buffer)


class SocketBody:
    """The body's bytes: first what gunicorn read past the headers, then
    recv_into straight from the socket. Nothing is taken before it is read,
    and LengthReader.length counts down as bytes are: however much of the
    body the view reads (none, when it refuses the request first), gunicorn
    drains exactly the rest, and the next request on the connection starts
    where it should."""

    def __init__(self, body: Body, reader: LengthReader, deadline: Deadline):
        self._body, self._reader, self._deadline = body, reader, deadline
        self._unreader = reader.unreader

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self._reader.length)
        if wanted <= 0:
            return 0
        held = self._unreader.buf.getvalue()
        if held:
            got = min(wanted, len(held))
            buffer[:got] = held[:got]
            self._unreader.buf = io.BytesIO()
            self._unreader.buf.write(held[got:])    # the rest, maybe a pipelined request
        else:
            try:
                got = self._deadline.read(self._unreader.sock.recv_into, buffer, wanted)
            except OSError as exc:
                self._body.failed = True     # where the next request starts is unknown
                raise ClientDisconnected() from exc
        self._reader.length -= got
        return got
