"""Interactive runs on the dev cluster: `div shell` in tmux as a person
types at it (a real PTY in the run's sandbox: colours, resize, Ctrl-C to
the run, exit ending and billing the run), a dropped connection and
--attach, a shell left alone ending, and `div notebook`'s URL answering
Jupyter's own REST API through the server for the org's key alone."""
from __future__ import annotations

import json
import os
import re
import signal
import time

import requests
from playwright.sync_api import expect

from tests.interactive import Tmux
from tests.stack import NOTEBOOK_HOST, VENV_BIN

BROWSER_PASSWORD = "interactive-test-password"


def shell(stack, project, *args: str, org: str = "e2e") -> Tmux:
    return Tmux([str(VENV_BIN / "div"), "shell", "--gpu", "cpu", *args], project,
                stack.div_env(org))


def test_a_shell_is_a_terminal_in_the_run_and_its_exit_ends_the_run(stack, project):
    (project / "train.py").write_text("print('hi')\n")
    term = shell(stack, project, "--name", "sh-basic")
    try:
        term.wait_for("$ ")
        term.line("pwd; ls; tty")
        screen = term.wait_for("/dev/pts/")
        assert "/workspace" in screen and "train.py" in screen
        # As confined as any run: none of the node's Slurm or munge.
        term.line("ls /etc/slurm /run/munge; echo listed=$((100 + $?))")
        assert "slurm.conf" not in term.wait_for("listed=102")
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
    listed = stack.div("ls", cwd=project).stdout.decode()
    assert re.search(r"^sh-basic +\S+ +\S+ +failed +shell ", listed, re.M), listed


def test_a_dropped_connection_keeps_the_shell_for_attach(stack, project):
    term = shell(stack, project, "--name", "sh-attach")
    again = None
    try:
        term.wait_for("$ ")
        term.line("export KEPT=still-set; echo set-$((1 + 1))")
        term.wait_for("set-2")
        os.kill(term.client_pid(), signal.SIGKILL)      # the connection drops, not the run
        assert stack.run_json("sh-attach")["status"] == "running"
        again = shell(stack, project, "--attach", "sh-attach")
        # What the terminal showed last comes back first.
        again.wait_for("set-2")
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


def signed_in_page(stack, browser):
    stack.flask("set-password", "e2e-user", "--password", BROWSER_PASSWORD)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{stack.url}/login")
    page.fill("input[name=username]", "e2e-user")
    page.fill("input[name=password]", BROWSER_PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Runs")
    return page


def test_the_notebook_opens_from_its_run_page_and_runs_a_cell(stack, project, browser):
    done = stack.div("notebook", "--gpu", "cpu", "--name", "nb-browser", "-d", cwd=project)
    assert done.returncode == 0, done.stderr
    page = signed_in_page(stack, browser)
    try:
        stack.wait_for_status("nb-browser", "running", timeout=60)
        page.goto(f"{stack.url}/runs/nb-browser")
        with page.context.expect_page() as opened:
            page.click("text=Open notebook")
        lab = opened.value
        expect(lab.locator(".jp-Launcher")).to_be_visible(timeout=90_000)
        # On the notebook host, never the dashboard's origin.
        assert lab.url.startswith(f"http://{NOTEBOOK_HOST}:{stack.port}/runs/nb-browser/notebook/")
        lab.click(".jp-LauncherCard[title*='Python 3'] >> nth=0")
        # The kernel's WebSocket, through the server, says it is ready.
        expect(lab.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60_000)
        cell = lab.locator(".jp-Notebook .jp-Cell .cm-content").first
        cell.click()
        lab.keyboard.type("print(6 * 7)")
        expect(cell).to_have_text("print(6 * 7)")
        lab.keyboard.press("Shift+Enter")
        expect(lab.locator(".jp-OutputArea-output").first).to_have_text("42", timeout=60_000)
    finally:
        stack.div("stop", "nb-browser", cwd=project)
        page.close()


def test_the_terminal_tab_runs_a_command_in_the_shell(stack, project, browser):
    started = stack.api("POST", "/runs", json={"project": "tabs", "command": "", "gpu": "cpu",
                                              "kind": "shell", "name": "sh-browser"})
    assert started.status_code == 201, started.text
    page = signed_in_page(stack, browser)
    try:
        stack.wait_for_status("sh-browser", "running", timeout=60)
        page.goto(f"{stack.url}/runs/sh-browser")
        page.click("nav.tabs >> text=Terminal")
        terminal = page.locator("#terminal")
        expect(terminal).to_have_attribute("data-state", "open", timeout=60_000)
        expect(terminal.locator(".xterm-rows")).to_contain_text("$", timeout=30_000)
        terminal.click()
        page.keyboard.type("echo $((6 * 7))-in-the-browser\n")
        expect(terminal.locator(".xterm-rows")).to_contain_text("42-in-the-browser")
        page.keyboard.type("exit 0\n")
        expect(terminal).to_have_attribute("data-state", "ended", timeout=30_000)
    finally:
        page.close()
    assert stack.wait_for_status("sh-browser", "succeeded")["kind"] == "shell"


def test_a_shell_beside_a_running_batch_run_sees_it_and_leaves_it_running(stack, project):
    (project / "train.py").write_text(
        "import time\nopen('progress.txt', 'w').write('step 7')\ntime.sleep(300)\n")
    started = stack.div("run", "--gpu", "cpu", "-d", "--name", "batch-beside", "--env",
                        "LR=3e-4", "train.py", cwd=project)
    assert started.returncode == 0, started.stderr
    stack.wait_for_status("batch-beside", "running", timeout=60)
    term = shell(stack, project, "batch-beside")
    try:
        term.wait_for("$ ")
        # The run's files, environment and processes, in its sandbox.
        term.line("cat progress.txt; echo; echo lr=$LR; pgrep -fc train.py; ls /etc/slurm")
        screen = term.wait_for("lr=3e-4")
        assert "step 7" in screen and "No such file" in term.wait_for("No such file")
        term.line("exit 4")
        assert term.exit_code() == 4
    finally:
        term.close()
    assert stack.run_json("batch-beside")["status"] == "running"
    stack.div("stop", "batch-beside", cwd=project)
