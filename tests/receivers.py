"""Real receivers on 127.0.0.1 for notification tests: an HTTP server that
answers 500 to its first `failures` POSTs, and aiosmtpd's SMTP server. Each
keeps what it got, with the moment it came."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller

from tests.serving import start_serving, stop_serving
from tests.sshd import free_port


class Webhook:
    def __init__(self, failures: int = 0):
        self.failures, self.tries, self.received = failures, [], []
        self.deliveries = []     # X-Div-Delivery of every try
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.tries.append(time.monotonic())
                receiver.deliveries.append(self.headers["X-Div-Delivery"])
                if len(receiver.tries) <= receiver.failures:
                    self.send_response(500)
                else:
                    receiver.received.append(json.loads(body))
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = start_serving(self.server) + "/hook/T0/B0"

    def close(self):
        stop_serving(self.server)


class Mailbox:
    """What aiosmtpd's server took: (envelope recipients, message text)."""

    def __init__(self, port: int):
        self.received = []
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                mailbox.received.append((envelope.rcpt_tos, envelope.content.decode()))
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)
        self.controller.start()

    def close(self):
        self.controller.stop()


@contextlib.contextmanager
def receivers(smtp_port: int, failures: int = 0):
    webhook, mailbox = Webhook(failures), Mailbox(smtp_port)
    try:
        yield webhook, mailbox
    finally:
        webhook.close()
        mailbox.close()


def wait_for(condition, timeout: float = 60.0) -> float:
    """Seconds until `condition()` held; fails after `timeout`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "not within the time allowed"
        time.sleep(0.1)
    return time.monotonic() - started


class Drip:
    """A receiver that answers a byte every half second, forever: no read
    ever times out."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/slow"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    @staticmethod
    def _drip(connection):
        with contextlib.suppress(OSError), connection:
            connection.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            while True:
                time.sleep(0.5)
                connection.sendall(b"x")

    def close(self):
        self.listener.close()
