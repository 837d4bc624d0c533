"""`div` as a cron job runs it: no terminal, so never a prompt, and an API
it cannot reach is a non-zero exit with one line on stderr. And schedules,
which the server keeps so that no crontab is needed at all."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time

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


def test_a_schedule_starts_its_run_within_a_minute(stack, project):
    (project / "eval.py").write_text("print('evaluated')\n")
    bad = stack.div("schedule", "create", "--cron", "61 * * * *", "--", "--gpu", "cpu",
                    "eval.py", cwd=project)
    # Found before the upload (no upload line), as a bad flag is: exit 2.
    assert bad.returncode == 2 and b"cron: minute: '61' is outside 0-59" in bad.stderr
    assert "→".encode() not in bad.stderr
    made = stack.div("schedule", "create", "--cron", "* * * * *", "--name", "every-minute",
                     "--", "--gpu", "cpu", "eval.py", "--check", "exit_code==0", cwd=project)
    assert made.returncode == 0 and made.stdout == b"every-minute\n", made.stderr
    listed = json.loads(stack.div("schedule", "ls", "--json", cwd=project).stdout)
    assert [(s["name"], s["cron"], s["command"]) for s in listed] == [
        ("every-minute", "* * * * *", "python -u eval.py")]

    deadline = time.monotonic() + 90          # the next minute, and a reconciler cycle
    fired = None
    while fired is None and time.monotonic() < deadline:
        fired = stack.api("GET", "/schedules").json()["schedules"][0]["last_run"]
        time.sleep(1)
    assert fired, "the schedule did not start a run within 90 s"
    run = stack.wait_for_status(fired, "succeeded", timeout=60)
    assert run["checks"][0]["verdict"] == "passed"
    assert stack.div("logs", fired, cwd=project).stdout == b"evaluated\n"

    page = stack.dashboard_session("e2e-user", "schedule-test-password").get(
        f"{stack.url}/schedules").text
    assert "every-minute" in page and f">{fired}</a>" in page
    assert "every-minute" not in stack.api("GET", "/schedules", org="other").text
    assert stack.api("DELETE", "/schedules/every-minute", org="other").status_code == 404
    assert stack.div("schedule", "rm", "every-minute", cwd=project).returncode == 0
    assert stack.api("GET", "/schedules").json()["schedules"] == []


def test_small_words_a_cron_user_meets(stack, project):
    """No schedules says so (not a bare header); a month that is not one is a
    bad flag, exit 2, before the API is asked."""
    stack.add_org("no-schedules")
    listed = stack.div("schedule", "ls", cwd=project, org="no-schedules")
    assert listed.returncode == 0 and listed.stdout == b""
    assert listed.stderr.decode().startswith("no schedules yet: make one with div schedule create")
    bad = stack.div("usage", "--month", "2027-13", cwd=project)
    assert bad.returncode == 2 and "'2027-13': use YYYY-MM" in bad.stderr.decode()
