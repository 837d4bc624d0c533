"""`div` as a cron job runs it: no terminal, so never a prompt, and an API
it cannot reach is a non-zero exit with one line on stderr."""
from __future__ import annotations

import os
import socket
import subprocess

from tests.stack import VENV_BIN


def _div(*args: str, cwd, home, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DIV_")}
    return subprocess.run([str(VENV_BIN / "div"), *args], cwd=cwd, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=60,
                          env={**base, "HOME": str(home), **env})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_api_it_cannot_reach_is_exit_1_and_one_line(tmp_path):
    (tmp_path / "eval.py").write_text("print('never runs')\n")
    url = f"http://127.0.0.1:{_closed_port()}"
    done = _div("run", "--gpu", "cpu", "--check", "metrics.accuracy>=0.8", "--json", "eval.py",
                cwd=tmp_path, home=tmp_path, DIV_API_URL=url, DIV_TOKEN="div_abc_def")
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        f"cannot reach the API at {url}: connection refused"]


def test_nothing_asks_when_there_is_no_terminal(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    for args, says in ((("login",), "pass --api-url (no terminal to ask on)"),
                       (("login", "--api-url", url), "pass --token (no terminal to ask on)"),
                       (("storage", "rm", "vol"), "needs --yes (no terminal to ask on)"),
                       (("secrets", "set", "TOKEN"), "the value is empty")):
        done = _div(*args, cwd=tmp_path, home=tmp_path, DIV_API_URL=url, DIV_TOKEN="div_a_b")
        # A prompt would have read the empty stdin and said "Aborted!".
        assert done.returncode == 2 and b"Aborted" not in done.stderr, (args, done.stderr)
        assert says in done.stderr.decode(), (args, done.stderr)
    no_key = _div("ls", cwd=tmp_path, home=tmp_path, DIV_API_URL=url)
    assert no_key.returncode == 2 and b"div login" in no_key.stderr
