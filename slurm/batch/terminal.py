"""A shell run's one program, inside its sandbox (div shell): the run's
command on a terminal of its own (a PTY), served as a WebSocket on the
job's own address, which only the server reaches (the node's prolog), and
only with the run's token. The standard library alone: it runs on the
node's Python or the image's.

Binary messages carry the terminal's bytes both ways; a text message from
the server resizes it ({"resize": [rows, cols]}); the last one from here
says how the command ended ({"exit": code}). One client at a time: a new
one takes the terminal over, and first gets what the terminal showed last,
so that a dropped connection loses nothing (div shell --attach). With no
client for the site's idle time, the command is hung up and the run ends.

argv: idle seconds, the command (for bash -c); env: DIV_INTERACTIVE_PORT
and DIV_INTERACTIVE_TOKEN, neither passed on to the command."""
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
HANDSHAKE_SECONDS = 5
SEND_SECONDS = 10


def handshake(conn, token):
    """The server's upgrade request, checked; True when the 101 went out."""
    conn.settimeout(HANDSHAKE_SECONDS)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) > 16384:
            return False
        head += chunk
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
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


def frame(opcode, payload):
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def unmask(mask, payload):
    n = len(payload)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def messages(buf):
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
        data = unmask(buf[at:at + 4], buf[at + 4:at + 4 + n])
        out.append((b0 & 0x0F, data, bool(b0 & 0x80)))
        buf = buf[at + 4 + n:]
    return out, buf


class Terminal:
    def __init__(self, idle, command):
        self.idle = idle
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            os.execv("/bin/bash", ["bash", "-c", command])
        os.set_blocking(self.master, False)
        self.shown = b""
        self.pending = b""       # typed, not yet taken by the terminal
        self.client = None
        self.inbox = b""
        self.partial = (None, b"")
        self.alone_since = time.monotonic()

    def take(self, conn):
        if self.client is not None:
            self.drop(1008, b"taken over by another connection")
        self.client, self.inbox, self.partial = conn, b"", (None, b"")
        self.send(2, self.shown)

    def send(self, opcode, payload):
        if self.client is None:
            return
        try:
            self.client.sendall(frame(opcode, payload))
        except OSError:
            self.drop()

    def drop(self, code=None, reason=b""):
        if code is not None:
            try:
                self.client.sendall(frame(8, struct.pack("!H", code) + reason))
            except OSError:
                pass
        self.client.close()
        self.client = None
        self.alone_since = time.monotonic()

    def from_client(self):
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

    def message(self, opcode, payload, fin):
        first, held = self.partial
        if opcode == 0:
            opcode, payload = first, held + payload
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

    def control(self, payload):
        try:
            rows, cols = json.loads(payload)["resize"]
            size = struct.pack("HHHH", int(rows), int(cols), 0, 0)
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)
        except (ValueError, KeyError, TypeError, OverflowError, struct.error, OSError):
            pass

    def from_command(self):
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

    def typed(self):
        try:
            n = os.write(self.master, self.pending)
        except BlockingIOError:
            return
        self.pending = self.pending[n:]

    def exit_code(self):
        """The command's exit code once it has ended, else None."""
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        code = os.waitstatus_to_exitcode(status)
        return 128 - code if code < 0 else code

    def hang_up(self):
        minutes = round(self.idle / 60)
        sys.stderr.write(f"divergent: no terminal was attached for {minutes} minutes: "
                         "the shell was hung up\n")
        sys.stderr.flush()
        try:
            os.killpg(self.pid, signal.SIGHUP)
        except OSError:
            pass


def main():
    port = int(os.environ.pop("DIV_INTERACTIVE_PORT"))
    token = os.environ.pop("DIV_INTERACTIVE_TOKEN")
    idle, command = float(sys.argv[1]), sys.argv[2]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(8)
    term = Terminal(idle, command)
    hung_up, code = False, None
    while code is None:
        readable = [listener, term.master] + ([term.client] if term.client else [])
        writable = [term.master] if term.pending else []
        ready, can_write, _ = select.select(readable, writable, [], 1.0)
        if term.master in can_write:
            term.typed()
        if term.master in ready:
            term.from_command()
        if term.client is not None and term.client in ready:
            term.from_client()
        if listener in ready:
            conn, _ = listener.accept()
            try:
                accepted = handshake(conn, token)
            except OSError:
                accepted = False
            if accepted:
                term.take(conn)
            else:
                conn.close()
        if (term.client is None and not hung_up
                and time.monotonic() - term.alone_since > term.idle):
            term.hang_up()
            hung_up = True
        code = term.exit_code()
    # What it wrote last (processes it left behind die with the sandbox).
    while term.from_command() and select.select([term.master], [], [], 0.05)[0]:
        pass
    term.send(1, json.dumps({"exit": code}).encode())
    if term.client is not None:
        term.drop(1000)
    sys.exit(code)


main()
