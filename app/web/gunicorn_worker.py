"""gunicorn's threaded worker, with two changes.

A request's header must be in within DIV_CLIENT_HEADER_SECONDS (30) of its
first byte: gunicorn gives each read of it a deadline (SO_RCVTIMEO, from
gunicorn_conf.py), not the whole, so a client sending a header line every
few seconds would hold a thread for as long as it liked, and a few hundred
of them every thread (an outsider's slowloris froze the API so, with no key
at all). A watchdog shuts such a connection down; its thread goes back.

A connection that closes after its response is closed by the worker thread
that served it, not by the worker's main thread. gunicorn closes it
gracefully (RFC 9112 9.6: it lingers up to 2 s for the client's unread
bytes), and on the main thread that linger blocks accepting, keep-alive and
the heartbeat: a few dozen clients that stall after their answer stopped a
worker for a minute and got it killed as hung (WORKER TIMEOUT), with every
other org's requests on it. A body the server gave up on (a refused upload,
app/web/upload_body.py) is not lingered for at all: the client is told at
once. Log followers are handed to a thread of their own (app/web/follow_hub.py):
the API's follow view leaves the stream in the request's environ
(HAND_OFF), and this worker gives the connection to the hub instead of
writing the response, so a waiting follower holds none of its threads. A
WebSocket spliced to an interactive run (app/web/run_proxy.py, SPLICED) is
over when its view returns: the worker closes it without an answer.

scripts/services and deploy/systemd run it (--worker-class)."""
from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta
from types import SimpleNamespace

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from divergent.app.web.follow_hub import HAND_OFF, HUB, FollowHub, response_head
from divergent.app.web.run_proxy import SPLICED

HEADER_SECONDS = float(os.environ.get("DIV_CLIENT_HEADER_SECONDS", "30"))


class HandedOff(StopIteration):
    """The hub serves this request: gunicorn writes nothing for it and lets
    the connection go (its handle() ends a connection so, quietly)."""


class LingerInThreadWorker(ThreadWorker):
    def init_process(self):
        self._reading: dict[socket.socket, float] = {}    # a header being read, since when
        self._reading_lock = threading.Lock()
        self._handed_off: set[socket.socket] = set()
        threading.Thread(target=self._cut_slow_headers, name="header-deadline",
                         daemon=True).start()
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        app = self.wsgi
        self.hub = FollowHub(app)
        self.wsgi = self._handing_off(app)

    def _handing_off(self, app):
        """The app, with the hub offered to it; a stream it hands over is
        the hub's from here on."""
        def serve(environ, start_response):
            environ[HUB] = self.hub
            head: list = []

            def keep_head(status, headers, exc_info=None):
                head[:] = [status, headers]
                return start_response(status, headers, exc_info)
            body = app(environ, keep_head)
            if environ.get(SPLICED):
                # A WebSocket spliced to a run (app/web/run_proxy.py), over
                # by now: nothing more is written to it.
                if hasattr(body, "close"):
                    body.close()
                self._handed_off.add(environ["gunicorn.socket"])
                raise HandedOff
            stream = environ.get(HAND_OFF)
            if stream is None:
                return body
            if hasattr(body, "close"):
                body.close()
            sock = environ["gunicorn.socket"]
            chunked = environ.get("SERVER_PROTOCOL") != "HTTP/1.0"
            hub_sock = None
            try:
                written_head = response_head(*head, chunked)
                hub_sock = sock.dup()
                self.hub.adopt(hub_sock, written_head, *stream, chunked=chunked)
            except BaseException:
                # Never the hub's (no descriptor left, say): its slot goes back.
                if hub_sock is not None:
                    hub_sock.close()
                stream[2]()
                raise
            self._handed_off.add(sock)
            # Logged as handed over (its length unknown): gunicorn logs only what it wrote.
            self.log.access(SimpleNamespace(status=head[0], headers=head[1], sent=None), {},
                            environ, timedelta(0))
            raise HandedOff
        return serve

    def handle(self, conn):
        sock = conn.sock
        with self._reading_lock:
            self._reading[sock] = time.monotonic()
        try:
            keep = super().handle(conn)
        finally:
            self.header_read(sock)
        if sock in self._handed_off:
            # The hub has its own descriptor of the connection: this one
            # closes, the connection stays.
            self._handed_off.discard(sock)
            util.close(sock)
            conn.close = lambda graceful=False: None
            return False
        if keep is False:
            body = getattr(getattr(conn.parser, "mesg", None), "body", None)
            if getattr(body, "failed", False) is True:
                util.close(conn.sock)
            else:
                conn.close(graceful=True)
            # finish_request, on the main thread, would close it again.
            conn.close = lambda graceful=False: None
        return keep

    def header_read(self, sock) -> None:
        """The request's header is in (gunicorn_conf.pre_request), or its
        handling is over."""
        with self._reading_lock:
            self._reading.pop(sock, None)

    def _cut_slow_headers(self) -> None:
        while True:
            time.sleep(1)
            now = time.monotonic()
            with self._reading_lock:
                late = [sock for sock, since in self._reading.items()
                        if now - since > HEADER_SECONDS]
                for sock in late:
                    del self._reading[sock]
            for sock in late:
                try:
                    sock.shutdown(socket.SHUT_RDWR)     # its blocked read returns: closed
                except OSError:
                    pass
