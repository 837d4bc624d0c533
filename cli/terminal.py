"""A shell run's terminal on this one (div shell): the run's WebSocket
(/runs/<name>/terminal, through the API's host, its proxy and TLS as
every call) to and from this terminal in raw mode, so that Ctrl-C, colours
and full-screen programs are the run's; the window's size follows this
one's. wsproto speaks the protocol over the socket http.client opened."""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import termios
import tty
from collections.abc import Iterator
from urllib.parse import quote

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from divergent.cli.api import ApiClient, ApiError, ApiUnreachable

CHUNK = 65536
HANDSHAKE_SECONDS = 30
KEEPALIVE_SECONDS = 30


class Dropped(Exception):
    """The connection ended before the run's command did."""


class TakenOver(Dropped):
    """Another client attached to the shell (div shell --attach elsewhere)."""


class _Closed(Exception):
    """The run closed the WebSocket."""

    def __init__(self, code: int | None):
        super().__init__(code)
        self.code = code


# The terminal program's close code when another client takes the shell over.
TAKEN_OVER = 1008


def open_terminal(api: ApiClient, run: str) -> tuple[socket.socket, WSConnection]:
    """The run's terminal, connected; ApiError with the server's word when
    it refuses (503 while the run's program is not listening yet)."""
    conn = api.new_connection()
    try:
        conn.connect()
    except OSError as exc:
        raise ApiUnreachable(f"cannot reach the API at {api.url}: {exc}") from None
    sock = conn.sock
    ws = WSConnection(ConnectionType.CLIENT)
    headers = [(name.encode(), value.encode()) for name, value in api.auth_headers().items()]
    sock.sendall(ws.send(Request(host=api.host_header(), target=api.path_prefix() +
                                 f"/runs/{quote(run, safe='')}/terminal", extra_headers=headers)))
    sock.settimeout(HANDSHAKE_SECONDS)
    status, body, done = 502, b"", False
    while not done:
        data = sock.recv(CHUNK)
        ws.receive_data(data or None)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                sock.settimeout(None)
                return sock, ws
            if isinstance(event, RejectConnection):
                status, done = event.status_code, not event.has_body
            elif isinstance(event, RejectData):
                body, done = body + event.data, event.body_finished
        done = done or not data
    sock.close()
    try:
        message = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        message = f"the server answered {status}"
    raise ApiError(status, message)


@contextlib.contextmanager
def raw_terminal() -> Iterator[bool]:
    """This terminal in raw mode for the block, if stdin is one."""
    if not sys.stdin.isatty():
        yield False
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _resize(ws: WSConnection) -> bytes:
    """This terminal's size as it is now (never COLUMNS and LINES, which
    stay what they were when a shell set them)."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        size = shutil.get_terminal_size()
    return ws.send(TextMessage(json.dumps({"resize": [size.lines, size.columns]})))


def session(sock: socket.socket, ws: WSConnection) -> int:
    """Relays until the run's command ends: its exit code. Dropped when
    the connection ends first."""
    wake_r, wake_w = os.pipe()
    previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_w, b"w"))
    stdin = sys.stdin.fileno()
    said: list[int] = []
    try:
        sock.sendall(_resize(ws))
        # What came with the handshake (the terminal's last screen) first.
        _received(sock, ws, said)
        with raw_terminal():
            reading = [sock, wake_r, stdin]
            while True:
                ready, _, _ = select.select(reading, [], [], KEEPALIVE_SECONDS)
                if not ready:       # a quiet terminal: proxies on the way keep it open
                    sock.sendall(ws.send(Ping()))
                if wake_r in ready:
                    os.read(wake_r, 64)
                    sock.sendall(_resize(ws))
                if stdin in ready:
                    typed = os.read(stdin, CHUNK)
                    if typed:
                        sock.sendall(ws.send(BytesMessage(typed)))
                    else:       # stdin ended (a pipe): the shell reads to its end too
                        reading.remove(stdin)
                        sock.sendall(ws.send(BytesMessage(b"\x04")))
                if sock in ready:
                    data = sock.recv(CHUNK)
                    if not data:
                        break
                    ws.receive_data(data)
                    _received(sock, ws, said)
    except _Closed as closed:
        if closed.code == TAKEN_OVER and not said:
            raise TakenOver from None
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(wake_r)
        os.close(wake_w)
        sock.close()
    if not said:
        raise Dropped
    return said[-1]


def _received(sock: socket.socket, ws: WSConnection, said: list[int]) -> None:
    """The run's messages wsproto holds: bytes to this terminal, and the
    exit code (into `said`) when the command ends."""
    for event in ws.events():
        if isinstance(event, BytesMessage):
            sys.stdout.buffer.write(event.data)
            sys.stdout.buffer.flush()
        elif isinstance(event, TextMessage):
            code = json.loads(event.data).get("exit")
            if isinstance(code, int):
                said.append(code)
        elif isinstance(event, Ping):
            sock.sendall(ws.send(event.response()))
        elif isinstance(event, CloseConnection):
            with contextlib.suppress(OSError):
                sock.sendall(ws.send(event.response()))
            raise _Closed(event.code)


