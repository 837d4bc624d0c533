"""gunicorn settings the server always runs with (scripts/services and
deploy/systemd pass --config python:app.web.gunicorn_conf).

Every read and write on a client connection has a deadline, from its first
header byte: gunicorn's own reads and writes block without one, so a client
that sends half a request line, or stops reading a response, would hold a
worker thread for good. The listening sockets get SO_RCVTIMEO and
SO_SNDTIMEO, which each accepted connection inherits from the kernel: a
blocking read or write that waits longer fails, and gunicorn closes the
connection. A request's header has a deadline of its own
(app/web/gunicorn_worker.py), uploads the deadline of the whole body
(app/web/upload_body.py).

The umask: --daemon resets the process umask that --umask set (that one is
for sockets), so files the workers make on the share would be 0644."""
from __future__ import annotations

import os
import socket
import struct

IDLE_SECONDS = float(os.environ.get("DIV_CLIENT_IDLE_SECONDS", "60"))
UMASK = 0o077

# Workers and threads from the site's settings alone (DIV_WORKERS,
# DIV_THREADS), so the follower and transfer slots app/config.py derives
# from DIV_THREADS are shares of the threads the server really has. Log
# streams hold a thread each while they follow a run: threads, not workers.
workers = int(os.environ.get("DIV_WORKERS", "2"))
threads = int(os.environ.get("DIV_THREADS", "128"))


def _deadline(sock: socket.socket) -> None:
    seconds = int(IDLE_SECONDS)
    timeval = struct.pack("ll", seconds, int((IDLE_SECONDS - seconds) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


def when_ready(server) -> None:
    os.umask(UMASK)
    for listener in server.LISTENERS:
        _deadline(listener.sock)


def post_fork(server, worker) -> None:
    os.umask(UMASK)


def pre_request(worker, req) -> None:
    """The header is in: its deadline (app/web/gunicorn_worker.py) is over."""
    header_read = getattr(worker, "header_read", None)
    if header_read is not None:
        header_read(getattr(req.unreader, "sock", None))
