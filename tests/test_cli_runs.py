"""What a user expects of the commands around runs: `div ls` filtered,
`div logs --tail`, several runs a `div stop`, `div open`, `div rerun`, the
failed checks named in the last line, progress that makes sense from its
first frame, usage errors that say what to change, a folder deleted only
when asked, and completion of run and volume names. On the dev cluster
through the real server (tests/stack.py), and through the app over a real
HTTP server in a thread."""
from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import time

import pytest
from click.testing import CliRunner
from werkzeug.serving import make_server

from divergent.app.services.accounts.keys import create_key
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.files.volumes import ensure_volume
from divergent.app.services.runs import logs
from divergent.cli.main import cli
from divergent.cli.progress import Progress
from tests.serving import serving
from tests.stack import VENV_BIN, interrupt_as_a_terminal_does
from tests.test_money import last_line

LINES = "for i in $(seq 1 40); do echo out-$i; echo err-$i >&2; done"


def test_ls_filters_logs_tail_stop_many_open_and_rerun(stack, project):
    (project / "count.sh").write_text(LINES + "\nexit 3\n")
    first = stack.div("run", "--gpu", "cpu", "--name", "tally", "--", "sh count.sh", cwd=project)
    assert first.returncode == 3, first.stderr

    tail = stack.div("logs", "tally", "--tail", "3", cwd=project)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.decode() == "out-38\nout-39\nout-40\n"
    assert tail.stderr.decode() == "err-38\nerr-39\nerr-40\n"
    followed = stack.div("logs", "tally", "-f", "-n", "1", cwd=project)
    assert followed.returncode == 3 and followed.stdout.decode() == "out-40\n"

    # A rerun: the same code and command, a new run with its own name.
    again = stack.div("rerun", "tally", "--json", cwd=project)
    assert again.returncode == 3, again.stderr
    rerun = json.loads(again.stdout)             # the run alone; its log went to stderr
    assert "out-40\n" in again.stderr.decode()
    original = json.loads(stack.div("ls", "--json", "-n", "5", cwd=project).stdout)[1]
    assert rerun["name"] != "tally" and original["name"] == "tally"
    assert {k: rerun[k] for k in ("code", "command", "image", "gpu", "cpu", "memory")} == \
        {k: original[k] for k in ("code", "command", "image", "gpu", "cpu", "memory")}
    assert stack.div("logs", rerun["name"], "-n", "1", cwd=project).stdout == b"out-40\n"

    # Another user of the org starts runs; --mine, --user and --status pick.
    stack.flask("create-user", "e2e", "e2e-second")
    second = {**stack.div_env(), "DIV_TOKEN": stack.flask("create-key", "e2e-second").stdout.split()[-1]}
    for name in ("theirs-a", "theirs-b"):
        started = stack.div("run", "--gpu", "cpu", "--no-upload", "--detach", "--name", name,
                            "--", "sleep 300", cwd=project, env=second)
        assert started.returncode == 0, started.stderr

    def names(*flags: str, env=None) -> list[str]:
        listed = stack.div("ls", "--json", "-n", "500", *flags, cwd=project, env=env)
        assert listed.returncode == 0, listed.stderr
        return [r["name"] for r in json.loads(listed.stdout)]

    assert names("--user", "e2e-second")[:2] == ["theirs-b", "theirs-a"]
    assert set(names("--mine", env=second)) == {"theirs-a", "theirs-b"}
    assert not {"theirs-a", "theirs-b"} & set(names("--mine"))
    assert {"tally", rerun["name"]} <= set(names("--status", "failed"))
    assert not {"theirs-a", "theirs-b"} & set(names("--status", "failed"))
    table = stack.div("ls", "--user", "e2e-second", cwd=project).stdout.decode().splitlines()
    assert table[0].split()[:4] == ["NAME", "PROJECT", "USER", "STATUS"]
    assert table[1].split()[2] == "e2e-second"
    nobody = stack.div("ls", "--user", "nobody", cwd=project)
    assert nobody.returncode == 1 and nobody.stderr == b"no user named 'nobody' in e2e\n"
    none = stack.div("ls", "--project", "nothing-here", cwd=project)
    assert none.returncode == 0 and none.stderr == b"no runs match these filters\n"

    # Ctrl-C on `div logs -f` leaves the run going and says how to follow it again.
    following = subprocess.Popen([str(VENV_BIN / "div"), "logs", "theirs-a", "-f"], cwd=project,
                                 env=second, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 preexec_fn=interrupt_as_a_terminal_does)
    time.sleep(3)
    following.send_signal(signal.SIGINT)
    _, said = following.communicate(timeout=30)
    assert following.returncode == 0
    assert "stopped following; theirs-a goes on.\n  follow it again: div logs theirs-a -f\n" \
           "  stop it:         div stop theirs-a" in said.decode()

    # One stop for several runs; a name that is not a run says so, the rest stop.
    stopped = stack.div("stop", "theirs-a", "no-such-run", "theirs-b", cwd=project)
    assert stopped.returncode == 1
    said = stopped.stderr.decode().splitlines()
    assert said[0] == "stopping theirs-a" and said[2] == "stopping theirs-b"
    assert said[1].startswith("no-such-run: no run named")
    assert stack.div("logs", "theirs-a", "-f", cwd=project, timeout=60).returncode == 1

    opened = stack.div("open", "tally", cwd=project)
    assert opened.stdout.decode() == f"{stack.url}/runs/tally\n"
    assert stack.div("open", "nope", cwd=project).returncode == 1


def test_on_a_terminal_div_run_gives_the_runs_page(stack, project):
    """A person watching gets the page's address; a script's stderr is the
    docs' lines alone."""
    terminal, other_end = pty.openpty()
    done = subprocess.run([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload", "-d",
                           "--name", "on-a-tty", "--", "true"], cwd=project, env=stack.div_env(),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=other_end,
                          timeout=60)
    os.close(other_end)
    said = os.read(terminal, 4096).decode()
    os.close(terminal)
    assert done.returncode == 0 and done.stdout == b"on-a-tty\n"
    assert f"view it: {stack.url}/runs/on-a-tty" in said
    piped = stack.div("run", "--gpu", "cpu", "--no-upload", "-d", "--", "true", cwd=project)
    assert b"view it" not in piped.stderr


def test_the_last_line_names_the_checks_that_failed_and_what_they_saw(stack, project):
    failing = stack.div("run", "--gpu", "cpu", "--no-upload", "--check", "exit_code==0",
                        "--check", "metrics.accuracy>0.9", "--", "exit 4", cwd=project)
    assert failing.returncode == 4
    assert last_line(failing).endswith(
        " · passed 0 of 2 checks (failed: exit_code==0 was 4; no value: metrics.accuracy>0.9)")


def test_deleting_a_folder_asks_or_needs_yes(stack, project):
    (project / "data").mkdir()
    (project / "data" / "a.txt").write_text("a")
    assert stack.div("storage", "put", "keepers", "data", cwd=project).returncode == 0
    refused = stack.div("storage", "rm", "keepers", "data", cwd=project)
    assert refused.returncode == 2 and b"deleting the folder keepers/data needs --yes" in refused.stderr
    assert stack.div("storage", "ls", "keepers", "data", cwd=project).returncode == 0
    assert stack.div("storage", "rm", "keepers", "data/a.txt", cwd=project).returncode == 0
    assert stack.div("storage", "rm", "keepers", "data", "--yes", cwd=project).returncode == 0


@pytest.fixture
def served(app, tmp_path, monkeypatch):
    """The app over HTTP with one org, one key and a volume."""
    with app.app_context():
        org = get_or_create_org("acme")
        key = create_key(get_or_create_user(org, "alice"))
        ensure_volume(org, "datasets")
    with serving(make_server("127.0.0.1", 0, app, threaded=True)) as url:
        monkeypatch.setenv("DIV_API_URL", url)
        monkeypatch.setenv("DIV_TOKEN", key)
        monkeypatch.chdir(tmp_path)
        yield url


def div(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), prog_name="div", **kwargs)


@pytest.mark.parametrize("suffix", ["/api", "/api/v1"])
def test_an_api_url_ending_in_api_says_what_to_change(served, monkeypatch, suffix):
    monkeypatch.setenv("DIV_API_URL", served + suffix)
    listed = div("ls")
    assert listed.exit_code == 1
    assert listed.output.startswith(f"nothing at {suffix}/api/v1/runs: the API is under /api/v1/, "
                                    "and the CLI's API URL (DIV_API_URL, --api-url) is the "
                                    "server's address without /api")


def test_usage_errors_name_what_was_wrong(served):
    swapped = div("storage", "put", "../x")
    assert swapped.exit_code == 2
    assert "Invalid value for VOLUME: '../x' is not a volume's name (a name has no /); the " \
           "volume comes first: div storage put VOLUME LOCAL" in swapped.output
    bogus = div("schedule", "create", "--cron", "0 3 * * *", "--", "--bogus", "eval.py")
    assert bogus.exit_code == 2
    assert "Usage: div schedule create [OPTIONS]" in bogus.output
    assert "Error: after --, as div run takes them: No such option '--bogus'" in bogus.output
    # A name with a space or a ? is a name, quoted in the URL, never a traceback.
    for odd in ("a b", "x?y=1", "50%"):
        said = div("logs", odd)
        assert said.exit_code == 1 and said.output == f"no run named {odd!r}\n", said.output
    assert div("ls", "--mine", "--user", "bob").exit_code == 2
    assert "Invalid value for '--status'" in div("ls", "--status", "lost").output


def test_completion_offers_the_orgs_volumes_and_nothing_without_a_server(served, monkeypatch):
    def complete(line: str) -> list[str]:
        words = line.split(" ")
        done = div(env={"_DIV_COMPLETE": "bash_complete", "COMP_WORDS": line,
                        "COMP_CWORD": str(len(words) - 1)})
        return [row.split(",", 1)[1] for row in done.output.splitlines() if row]

    assert complete("div storage ls da") == ["datasets"]
    assert complete("div storage ls x") == []
    # A server typed on the line is not asked (it would get the stored key).
    assert complete("div storage ls --api-url http://127.0.0.1:9 da") == ["datasets"]
    monkeypatch.setenv("DIV_API_URL", "http://127.0.0.1:9")    # nothing listens
    assert complete("div storage ls ") == []


def test_progress_has_no_rate_or_eta_before_a_second_of_it():
    progress = Progress("put", 10 << 20, enabled=False)
    progress.add(1 << 20)
    start = progress.started
    assert progress.line(start + 0.05) == "put 1.0 MB / 10.5 MB  ETA -"
    assert progress.line(start + 2) == "put 1.0 MB / 10.5 MB  524.3 KB/s  ETA 18s"
    progress.done = 2000
    assert progress.line(start + 2).endswith("1.0 KB/s  ETA 2h 54m")


@pytest.mark.parametrize(("content", "lines", "tail"), [
    (b"", 3, b""), (b"a\nb\nc\n", 2, b"b\nc\n"), (b"a\nb\nc", 1, b"c"), (b"abc", 5, b"abc"),
    (b"\n\n\n", 2, b"\n\n"), (b"a long first line\nx\n", 1, b"x\n")])
def test_tail_starts_at_the_start_of_a_line(tmp_path, monkeypatch, content, lines, tail):
    monkeypatch.setattr(logs, "WINDOW_BYTES", 4)       # lines across blocks
    path = tmp_path / "stdout"
    path.write_bytes(content)
    assert content[logs._line_start_from_end(str(path), lines):] == tail


def test_tail_reads_back_no_further_than_its_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "WINDOW_BYTES", 4)
    monkeypatch.setattr(logs, "TAIL_SCAN_BYTES", 10)
    path = tmp_path / "stdout"
    path.write_bytes(b"x" * 100 + b"\nab\ncd\n")       # the last 10 bytes hold 2 whole lines
    assert path.read_bytes()[logs._line_start_from_end(str(path), 5):] == b"ab\ncd\n"
    path.write_bytes(b"y" * 100)                                  # one endless line
    assert logs._line_start_from_end(str(path), 1) == 90
