"""A real HTTP server in a thread, for the tests that need one beside them
(the in-process app for the CLI, a scripted API, a webhook receiver, an S3
endpoint that misbehaves)."""
from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator

# serve_forever's own 0.5 s poll is what shutdown() waits out: half a
# second of every test's teardown.
POLL_SECONDS = 0.02


def start_serving(server: socketserver.BaseServer) -> str:
    """`server` (werkzeug's make_server, http.server's) answering in a
    thread from now on; its URL."""
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS},
                     daemon=True).start()
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def stop_serving(server: socketserver.BaseServer) -> None:
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[str]:
    """`server` answering in a thread while the block runs; its URL."""
    url = start_serving(server)
    try:
        yield url
    finally:
        stop_serving(server)
