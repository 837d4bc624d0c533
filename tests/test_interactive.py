"""Interactive runs on the dev cluster: `div shell` in tmux as a person
types at it (a real PTY in the run's sandbox: colours, resize, Ctrl-C to
the run, exit ending and billing the run), a dropped connection and
--attach, a shell left alone ending, and `div notebook`'s URL answering
Jupyter's own REST API through the server for the org's key alone."""
from __future__ import annotations

import os
import signal
import time

import requests

from tests.interactive import Tmux


def shell(stack, project, *args: str, org: str = "e2e") -> Tmux:
    return Tmux([str(stack.div_env(org)["PATH"].split(":")[0] + "/div"), "shell", "--gpu", "cpu",
                 *args], project, stack.div_env(org))


def test_a_shell_is_a_terminal_in_the_run_and_its_exit_ends_the_run(stack, project):
    (project / "train.py").write_text("print('hi')\n")
    term = shell(stack, project, "--name", "sh-basic")
    try:
        term.wait_for("$ ")
        term.line("pwd; ls; tty")
        screen = term.wait_for("/dev/pts/")
        assert "/workspace" in screen and "train.py" in screen
        # Colours pass unchanged, and the terminal names itself so programs draw them.
        term.line(r"printf '\033[31mred-%s\033[0m\n' $TERM")
        term.wait_for("red-xterm-256color")
        assert "\x1b[31mred-xterm-256color" in term.screen_with_colours()
        # The window's size follows the client's.
        term.resize(120, 40)
        time.sleep(0.3)
        term.line("stty size")
        term.wait_for("40 120")
        # Ctrl-C goes to the run's foreground program, never to div.
        term.line("sleep 300")
        time.sleep(0.5)
        term.keys("C-c")
        term.line("echo still-here")
        term.wait_for("still-here\r\n".strip())
        term.line("exit 3")
        assert term.exit_code() == 3
    finally:
        term.close()
    run = stack.wait_for_status("sh-basic", "failed")
    assert (run["kind"], run["exit_code"], run["status"]) == ("shell", 3, "failed")
    assert run["cost"] != "$0.00" and run["duration"] is not None
    listed = stack.div("ls", "--json", cwd=project)
    assert b'"sh-basic"' in listed.stdout


def test_a_dropped_connection_keeps_the_shell_for_attach(stack, project):
    term = shell(stack, project, "--name", "sh-attach")
    again = None
    try:
        term.wait_for("$ ")
        term.line("export KEPT=still-set; echo set-it")
        term.wait_for("set-it")
        os.kill(term.client_pid(), signal.SIGKILL)      # the connection drops, not the run
        assert stack.run_json("sh-attach")["status"] == "running"
        again = shell(stack, project, "--attach", "sh-attach")
        # What the terminal showed last comes back first.
        again.wait_for("set-it")
        again.line("echo got-$KEPT")
        again.wait_for("got-still-set")
        again.line("exit")
        assert again.exit_code() == 0
    finally:
        term.close()
        if again is not None:
            again.close()
    assert stack.wait_for_status("sh-attach", "succeeded")["kind"] == "shell"


def test_a_notebook_answers_jupyters_api_for_its_org_alone(stack, project):
    done = stack.div("notebook", "--gpu", "cpu", "--name", "nb-api", "-d", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    import json
    run = json.loads(done.stdout)
    assert run["kind"] == "notebook" and run["url"] == f"{stack.url}/runs/nb-api/notebook/"
    mine = {"Authorization": f"Bearer {stack.tokens['e2e']}"}
    deadline = time.monotonic() + 120
    while True:
        answer = requests.get(run["url"] + "api/kernelspecs", headers=mine, timeout=30)
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    try:
        assert answer.status_code == 200, answer.text
        assert "python3" in answer.json()["kernelspecs"]
        theirs = {"Authorization": f"Bearer {stack.tokens['other']}"}
        assert requests.get(run["url"] + "api/kernelspecs", headers=theirs,
                            timeout=30).status_code == 404
        nobody = requests.get(run["url"] + "api/kernelspecs", timeout=30, allow_redirects=False)
        assert nobody.status_code == 302 and "/login" in nobody.headers["Location"]
    finally:
        stack.div("stop", "nb-api", cwd=project)
