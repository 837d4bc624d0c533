"""The terminal program interactive runs serve (slurm/batch/terminal.py),
run here as the nodes run it: a real PTY and bash, a real socket, a
WebSocket client (wsproto, as div shell's). The token, the frames no
client sends, a shell left alone, and shells beside a batch run; the
whole path through the server and the cluster: tests/test_interactive.py."""
from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import time

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    RejectConnection,
    Request,
    TextMessage,
)

from divergent.slurm.script import INTERACTIVE_TOKEN, TERMINAL
from tests.conftest import free_port

TOKEN = "a" * 64


@pytest.fixture
def serve(tmp_path):
    """The program in a mode, on a port of its own: (port, process)."""
    started = []

    def start(mode: str, idle: float = 60):
        port = free_port()
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TERM": "xterm-256color",
               "DIV_INTERACTIVE_PORT": str(port), INTERACTIVE_TOKEN: TOKEN, "PS1": "$ "}
        process = subprocess.Popen([sys.executable, "-I", "-c", TERMINAL, mode, str(idle),
                                    "bash --norc"], env=env, cwd=tmp_path,
                                   stderr=subprocess.PIPE, text=True)
        started.append(process)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return port, process
            except OSError:
                assert time.monotonic() < deadline, "the program never listened"
                time.sleep(0.05)
    yield start
    for process in started:
        process.kill()
        process.wait()


class Client:
    def __init__(self, port: int, token: str = TOKEN):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host="run", target="/",
                                               extra_headers=[(b"x-divergent-token", token.encode())])))
        self.seen, self.exit, self.closed, self.accepted = b"", None, False, None
        while self.accepted is None:
            self._read()

    def _read(self) -> None:
        data = self.sock.recv(65536)
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, RejectConnection):
                self.accepted = False
            elif isinstance(event, BytesMessage):
                self.seen += event.data
            elif isinstance(event, TextMessage):
                self.exit = json.loads(event.data)["exit"]
            elif isinstance(event, CloseConnection):
                self.closed = True
        if not data:
            self.closed = True

    def type(self, text: str) -> None:
        self.sock.sendall(self.ws.send(BytesMessage(text.encode())))

    def resize(self, rows: int, cols: int) -> None:
        self.sock.sendall(self.ws.send(TextMessage(json.dumps({"resize": [rows, cols]}))))

    def wait_for(self, pattern: str) -> re.Match:
        while (found := re.search(pattern.encode(), self.seen)) is None:
            assert not self.closed, self.seen
            self._read()
        return found

    def answers(self) -> None:
        """Its shell runs what it is sent."""
        self.type("echo ready-$((1 + 1))\n")
        self.wait_for("ready-2")

    def until_closed(self) -> None:
        while not self.closed:
            self._read()


def test_a_connection_without_the_runs_token_gets_nothing(serve):
    port, _ = serve("shell")
    assert Client(port, token="b" * 64).accepted is False
    client = Client(port)
    client.type("echo $((40 + 2))\n")
    client.wait_for("42")


def test_a_shell_comes_back_after_a_drop_and_is_hung_up_when_left_alone(serve):
    port, process = serve("shell", idle=2)
    first = Client(port)
    first.resize(33, 77)
    first.type("stty size; echo mark-$((1 + 1))\n")
    first.wait_for("mark-2")
    assert b"33 77" in first.seen
    first.sock.close()
    # What the terminal showed comes back first to the one who takes it over.
    again = Client(port)
    again.wait_for("mark-2")
    again.sock.close()
    assert process.wait(timeout=20) == 129          # bash's answer to SIGHUP
    assert "no terminal was attached for 0.0333333 minutes" in process.stderr.read()


def test_the_shells_exit_code_is_the_programs_and_is_said_to_the_client(serve):
    port, process = serve("shell")
    client = Client(port)
    client.type("exit 7\n")
    client.until_closed()
    assert client.exit == 7 and process.wait(timeout=10) == 7


def test_beside_a_batch_run_each_connection_has_a_shell_of_its_own(serve):
    port, process = serve("beside")
    one, two = Client(port), Client(port)
    one.type("echo one-$$\n")
    two.type("echo two-$$\n")
    pid_one = one.wait_for(r"one-(\d+)").group(1).decode()
    pid_two = two.wait_for(r"two-(\d+)").group(1).decode()
    assert pid_one != pid_two
    one.sock.close()                      # hung up: that shell ends, the other goes on
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid_one}"):
        assert time.monotonic() < deadline, "the dropped shell was never hung up"
        time.sleep(0.05)
    two.type("exit 3\n")
    two.until_closed()
    assert two.exit == 3
    assert process.poll() is None          # the program lasts as long as the run
    Client(port).answers()


def test_frames_no_client_sends_end_that_connection_alone(serve):
    port, process = serve("shell")
    bad = Client(port)
    bad.sock.sendall(struct.pack("!BB", 0x82, 5) + b"hello")    # unmasked
    bad.until_closed()
    huge = Client(port)
    huge.sock.sendall(struct.pack("!BBQ", 0x82, 0xFF, 1 << 40) + b"mask")
    huge.until_closed()
    assert process.poll() is None
    Client(port).answers()


def test_a_control_message_of_any_shape_is_ignored(serve):
    port, process = serve("shell")
    client = Client(port)
    for text in ("[" * 200_000, '{"resize": "x"}', "null", '{"resize": [1e400, -1]}'):
        client.sock.sendall(client.ws.send(TextMessage(text)))
    client.answers()
    assert process.poll() is None
