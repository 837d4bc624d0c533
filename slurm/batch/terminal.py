"""Terminals inside a run's sandbox, served as WebSockets on the job's own
address, which only the server reaches (the node's prolog), and only with
the run's token. The standard library alone: it runs on the node's Python
or the image's.

Two ways to run (argv: mode, idle seconds, command for bash -c):
- "shell", a shell run's one program (div shell): the command on one
  terminal. One client at a time: a new one takes the terminal over and
  first gets what it showed last, so a dropped connection loses nothing (div
  shell --attach); with no client for the idle time the command is hung up.
  The program ends, with the command's exit code, when the command does.
- "beside", beside a batch run's command on its first node (div shell RUN):
  each connection gets a shell of its own in the run's sandbox, hung up when
  the connection ends; the program lasts as long as the run.

Binary messages carry the terminal's bytes both ways; a text message from
the server resizes it ({"resize": [rows, cols]}); the last one from here
says how the command ended ({"exit": code}). env: DIV_INTERACTIVE_PORT and
DIV_INTERACTIVE_TOKEN, neither passed on to the commands."""
from __future__ import annotations

import base64
import errno
import fcntl
import hashlib
import hmac
import json
import os
import pty
import select
import signal
import socket
import struct
import sys
import termios
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SHOWN = 256 * 1024          # what a client that takes over gets first
MAX_MESSAGE = 1 << 20       # from the server: keystrokes, pastes
MAX_SESSIONS = 16           # beside a batch run: shells at once
MAX_CONTROL = 256           # a resize message
HANDSHAKE_SECONDS = 5
SEND_SECONDS = 10


def handshake(conn: socket.socket, token: str) -> bool:
    """The server's upgrade request, checked; True when the 101 went out."""
    conn.settimeout(HANDSHAKE_SECONDS)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) > 16384:
            return False
        head += chunk
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    given = headers.get("x-divergent-token", "").encode()
    key = headers.get("sec-websocket-key", "")
    if not key or not hmac.compare_digest(given, token.encode()):
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return False
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())
    conn.settimeout(SEND_SECONDS)
    return True


def frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def unmask(mask: bytes, payload: bytes) -> bytes:
    n = len(payload)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def messages(buf: bytes) -> tuple[list[tuple[int, bytes, bool]], bytes]:
    """Whole frames off the front of buf: (opcode, payload, fin) each, and
    what is left; ValueError for a frame no client sends."""
    out = []
    while len(buf) >= 2:
        b0, b1 = buf[0], buf[1]
        n, at = b1 & 0x7F, 2
        if n == 126:
            if len(buf) < 4:
                break
            n, at = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            if len(buf) < 10:
                break
            n, at = struct.unpack("!Q", buf[2:10])[0], 10
        if n > MAX_MESSAGE or not b1 & 0x80:
            raise ValueError("unmasked or oversized frame")
        if len(buf) < at + 4 + n:
            break
        out.append((b0 & 0x0F, unmask(buf[at:at + 4], buf[at + 4:at + 4 + n]), bool(b0 & 0x80)))
        buf = buf[at + 4 + n:]
    return out, buf


class Session:
    """A command on a terminal of its own, and the client that has it."""

    def __init__(self, command: str) -> None:
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            # A terminal that draws colours, beside a batch run (whose env has no TERM) too.
            os.environ.setdefault("TERM", "xterm-256color")
            os.execv("/bin/bash", ["bash", "-c", command])
        os.set_blocking(self.master, False)
        self.shown = b""
        self.pending = b""       # typed, not yet taken by the terminal
        self.client: socket.socket | None = None
        self.inbox = b""
        self.partial: tuple[int | None, bytes] = (None, b"")
        self.alone_since = time.monotonic()
        self.code: int | None = None
        self.hung_up = False

    def take(self, conn: socket.socket) -> None:
        if self.client is not None:
            self.drop(1008, b"taken over by another connection")
        self.client, self.inbox, self.partial = conn, b"", (None, b"")
        self.send(2, self.shown)

    def send(self, opcode: int, payload: bytes) -> None:
        if self.client is None:
            return
        try:
            self.client.sendall(frame(opcode, payload))
        except OSError:
            self.drop()

    def drop(self, code: int | None = None, reason: bytes = b"") -> None:
        if self.client is None:
            return
        if code is not None:
            try:
                self.client.sendall(frame(8, struct.pack("!H", code) + reason))
            except OSError:
                pass
        self.client.close()
        self.client = None
        self.alone_since = time.monotonic()

    def from_client(self) -> None:
        if self.client is None:
            return
        try:
            data = self.client.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.drop()
            return
        try:
            found, self.inbox = messages(self.inbox + data)
        except ValueError:
            self.drop(1009)
            return
        for opcode, payload, fin in found:
            self.message(opcode, payload, fin)
            if self.client is None:
                return

    def message(self, opcode: int, payload: bytes, fin: bool) -> None:
        first, held = self.partial
        if opcode == 0:
            opcode, payload = first or 0, held + payload
        if opcode in (1, 2) and not fin:
            self.partial = (opcode, payload if len(payload) <= MAX_MESSAGE else b"")
            return
        self.partial = (None, b"")
        if opcode == 2 and len(self.pending) < MAX_MESSAGE:
            self.pending += payload
        elif opcode == 1:
            self.control(payload)
        elif opcode == 9:
            self.send(10, payload)
        elif opcode == 8:
            self.drop(1000)

    def control(self, payload: bytes) -> None:
        """{"resize": [rows, cols]}; anything else is ignored, whatever its shape."""
        if len(payload) > MAX_CONTROL:
            return
        try:
            rows, cols = json.loads(payload)["resize"]
            size = struct.pack("HHHH", int(rows), int(cols), 0, 0)
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)
        except Exception:       # noqa: BLE001  (a deep nesting is a RecursionError)
            pass

    def from_command(self) -> bool:
        """False when the terminal has nothing more to give now."""
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.EIO:
                return False
            raise
        if not data:
            return False
        self.shown = (self.shown + data)[-SHOWN:]
        self.send(2, data)
        return True

    def typed(self) -> None:
        try:
            n = os.write(self.master, self.pending)
        except BlockingIOError:
            return
        except OSError:
            self.pending = b""
            return
        self.pending = self.pending[n:]

    def ended(self) -> bool:
        """Whether the command has ended (its exit code in self.code)."""
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return False
        code = os.waitstatus_to_exitcode(status)
        self.code = 128 - code if code < 0 else code
        return True

    def finish(self) -> None:
        """What the command wrote last, its exit code to the client, and the terminal closed."""
        while self.from_command() and select.select([self.master], [], [], 0.05)[0]:
            pass
        self.send(1, json.dumps({"exit": self.code}).encode())
        self.drop(1000)
        os.close(self.master)

    def hang_up(self) -> None:
        self.hung_up = True
        try:
            os.killpg(self.pid, signal.SIGHUP)
        except OSError:
            pass


def serve(mode: str, idle: float, command: str, listener: socket.socket,
          token: str) -> int | None:
    """Sessions until the shell run's command ends (mode shell), or for as
    long as the run lasts (beside): the exit code."""
    sessions = [Session(command)] if mode == "shell" else []
    hung_up = False
    while True:
        readable: list[socket.socket | int] = [listener]
        writable: list[int] = []
        for s in sessions:
            readable += [s.master] + ([s.client] if s.client else [])
            writable += [s.master] if s.pending else []
        ready, can_write, _ = select.select(readable, writable, [], 1.0)
        for s in sessions:
            if s.master in can_write:
                s.typed()
            if s.master in ready:
                s.from_command()
            if s.client is not None and s.client in ready:
                s.from_client()
            # Beside a batch run, a shell whose connection ended (closed, or
            # a send that failed) is hung up: nobody can come back to it.
            if s.client is None and mode == "beside" and not s.hung_up:
                s.hang_up()
        if listener in ready:
            conn, _ = listener.accept()
            try:
                accepted = len(sessions) < MAX_SESSIONS + (mode == "shell") and handshake(conn, token)
            except OSError:
                accepted = False
            if not accepted:
                conn.close()
            elif mode == "shell":
                sessions[0].take(conn)
            else:
                sessions.append(Session(command))
                sessions[-1].take(conn)
        if mode == "shell":
            shell = sessions[0]
            if shell.client is None and not hung_up and time.monotonic() - shell.alone_since > idle:
                sys.stderr.write(f"divergent: no terminal was attached for {idle / 60:g} minutes: "
                                 "the shell was hung up\n")
                sys.stderr.flush()
                shell.hang_up()
                hung_up = True
        for s in [s for s in sessions if s.ended()]:
            s.finish()
            if mode == "shell":
                return s.code
            sessions.remove(s)


def main() -> None:
    port = int(os.environ.pop("DIV_INTERACTIVE_PORT"))
    token = os.environ.pop("DIV_INTERACTIVE_TOKEN")
    mode, idle, command = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(8)
    sys.exit(serve(mode, idle, command, listener, token))


main()
