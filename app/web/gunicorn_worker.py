"""gunicorn's threaded worker, with one change: a connection that closes
after its response is closed by the worker thread that served it, not by
the worker's main thread. gunicorn closes it gracefully (RFC 9112 9.6: it
lingers up to 2 s for the client's unread bytes), and on the main thread
that linger blocks accepting, keep-alive and the heartbeat: a few dozen
clients that stall after their answer stopped a worker for a minute and
got it killed as hung (WORKER TIMEOUT), with every other org's requests on
it. A body the server gave up on (a refused upload, app/web/upload_body.py)
is not lingered for at all: the client is told at once. scripts/services
and deploy/systemd run it (--worker-class)."""
from __future__ import annotations

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker


class LingerInThreadWorker(ThreadWorker):
    def handle(self, conn):
        keep = super().handle(conn)
        if keep is False:
            body = getattr(getattr(conn.parser, "mesg", None), "body", None)
            if getattr(body, "failed", False) is True:
                util.close(conn.sock)
            else:
                conn.close(graceful=True)
            # finish_request, on the main thread, would close it again.
            conn.close = lambda graceful=False: None
        return keep
