"""Queued runs say why they wait; many log followers never starve the API."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
import time

import pytest
import requests

from tests.stack import VENV_BIN, read_terminal


def _wait_for(predicate, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


@pytest.mark.cluster_wide   # holds every L40S
def test_a_queued_run_says_why_it_waits_on_a_terminal_only(stack, project):
    # Every L40S of the four nodes held, until the test stops it. It starts
    # once the nodes are all free: the tests before (a node restarted, jobs
    # still completing) may keep one busy a while.
    hold = stack.div("run", "--gpu", "l40s", "--gpus", "32", "-d", "--no-upload", "--name",
                     "holds-l40s", "--", "sleep 300", cwd=project)
    assert hold.returncode == 0, hold.stderr
    held = stack.wait_for_status("holds-l40s", "running", timeout=180)
    assert held["status"] == "running", held["waiting"]

    # On a terminal: the reason, rewritten in place on stderr.
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "l40s", "--gpus", "16",
                             "--no-upload", "--name", "waits-tty", "--", "echo ran"],
                            cwd=project, env=stack.div_env(), stdout=subprocess.PIPE,
                            stderr=terminal, stdin=subprocess.DEVNULL)
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + 30
    while b"waiting for" not in seen and time.monotonic() < deadline:
        seen += os.read(controller, 4096)
    assert b"\r\x1b[Kwaits-tty queued: waiting for 16 x L40S" in seen
    assert stack.run_json("waits-tty")["waiting"] == "waiting for 16 x L40S"

    # Not a terminal: nothing of it.
    piped = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "l40s", "--gpus", "16",
                              "--no-upload", "--name", "waits-pipe", "--", "echo ran"],
                             cwd=project, env=stack.div_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    _wait_for(lambda: stack.api("GET", "/runs/waits-pipe").status_code == 200)
    assert stack.div("stop", "holds-l40s", cwd=project).returncode == 0
    out, err = piped.communicate(timeout=90)
    # 16 GPUs are two nodes of 8: the command runs once on each.
    assert (piped.returncode, out) == (0, b"ran\nran\n")
    assert b"queued" not in err and b"\x1b" not in err
    assert proc.wait(timeout=90) == 0
    assert proc.stdout.read() == b"ran\nran\n"
    while True:   # drain the terminal so the process never blocks on it
        try:
            if not os.read(controller, 4096):
                break
        except OSError:
            break
    os.close(controller)


def _follow_when_there_is_a_slot(stack, name: str) -> requests.Response:
    """As `div` follows: past the org's share of a worker's follow slots the
    server answers 429, and the follower tries again after Retry-After."""
    while True:
        answer = requests.get(f"{stack.url}/api/v1/runs/{name}/logs", params={"follow": "1"},
                              headers={"Authorization": f"Bearer {stack.tokens['e2e']}"},
                              stream=True, timeout=(5, 60))
        if answer.status_code != 429:
            return answer
        answer.close()
        time.sleep(int(answer.headers["Retry-After"]))


def test_fifty_followers_and_div_run_still_answers(stack, project):
    (project / "tick.py").write_text(
        # Until stopped: under load the test's own steps outlast half a minute.
        "import time\nfor i in range(1200):\n    print(i, flush=True)\n    time.sleep(0.5)\n")
    started = stack.div("run", "--gpu", "cpu", "-d", "--name", "watched", "tick.py", cwd=project)
    assert started.returncode == 0, started.stderr
    ends, first_events = [], threading.Semaphore(0)

    def follower():
        answer = _follow_when_there_is_a_slot(stack, "watched")
        with answer:
            for n, line in enumerate(answer.iter_lines()):
                if n == 0:
                    first_events.release()
                event = json.loads(line)
                if event.get("event") == "end":
                    ends.append(event["run"]["status"])

    threads = [threading.Thread(target=follower, daemon=True) for _ in range(50)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert first_events.acquire(timeout=60), "a follower got no event"

    # With 50 streams open, a new run starts and the API answers as usual.
    (project / "quick.py").write_text("print('quick')\n")
    quick = stack.div("run", "--gpu", "cpu", "quick.py", cwd=project, timeout=60)
    assert (quick.returncode, quick.stdout) == (0, b"quick\n")
    assert stack.api("GET", "/runs").status_code == 200

    assert stack.div("stop", "watched", cwd=project).returncode == 0
    for thread in threads:
        thread.join(timeout=60)
    assert ends == ["canceled"] * 50


def test_on_a_terminal_the_last_line_starts_a_line_of_its_own(stack, project):
    """stdout and stderr on one terminal are one screen: after a log that
    ends without a newline, the last line still starts at the left edge."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload",
                             "--name", "no-newline-tty", "--", "printf 'no newline here'"],
                            cwd=project, env=stack.div_env(), stdout=terminal, stderr=terminal,
                            stdin=subprocess.DEVNULL)
    os.close(terminal)
    seen = read_terminal(controller)
    assert proc.wait(timeout=60) == 0
    assert b"no newline here\r\nno-newline-tty finished in " in seen, seen
