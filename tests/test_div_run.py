"""`div run` as docs/users/div-run.md promises it, end to end:
the real `div` against the real server, reconciler and dev Slurm cluster."""
from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import time
from decimal import Decimal

import pytest

from divergent.app.services.money.pricing import format_usd
from divergent.slurm.client import SlurmClient
from tests.jobs import wait_for_end
from tests.sshd import free_port
from tests.stack import VENV_BIN, interrupt_as_a_terminal_does, running_stack

HEADER = re.compile(r"^(run-[a-z0-9]{4,}) (.+) \$(\d+\.\d\d)/h "
                    r"(max spend \$\d+\.\d\d \(about .+\)|no spend limit)$")


def write(folder, name, text, mode=0o644):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def lines(done) -> list[str]:
    return done.stderr.decode().splitlines()


def run_name(done) -> str:
    return HEADER.match(lines(done)[1]).group(1)


def test_entrypoint_forms_run_in_workspace(stack, project):
    write(project, "train.py", "import os\ndef run():\n    print('run() in', os.getcwd())\n")
    write(project, "models/__init__.py", "")
    write(project, "models/lora.py", "def train():\n    print('lora.train')\n")
    write(project, "script.py", "import sys\nprint('script', sys.argv[1:])\n")
    cases = [
        (["train.py::run"], b"run() in /workspace\n"),
        (["models/lora.py::train"], b"lora.train\n"),
        (["script.py"], b"script []\n"),
        (["python script.py a 'b c'"], b"script ['a', 'b c']\n"),
        (["--", "python", "script.py", "--lr", "3e-4", "b c"], b"script ['--lr', '3e-4', 'b c']\n"),
    ]
    for args, expected in cases:
        done = stack.div("run", "--gpu", "cpu", *args, cwd=project)
        assert (done.returncode, done.stdout) == (0, expected), (args, done.stderr)


def test_header_lines_and_last_line(stack, project):
    write(project, "train.py", "print('hello')\n")
    done = stack.div("run", "--gpu", "h100", "--max-spend", "5", "train.py", cwd=project)
    assert done.returncode == 0, done.stderr
    first, second, *_, last = lines(done)
    assert re.fullmatch(r"1 file, 15 B → very-cool-classifier-code/code/[0-9a-f]{8}", first)
    name = run_name(done)
    assert second == f"{name} H100 $4.80/h max spend $5.00 (about 1h 2m)"
    assert re.fullmatch(rf"{name} finished in \d+s and spent \$0\.08", last)
    # The tree is in the project's code volume, at the hash the line names.
    ref = first.rsplit(" ", 1)[1]
    assert (stack.data_dir / "share" / "e2e" / ref / "train.py").read_text() == "print('hello')\n"


def test_exit_code_is_the_runs_own(stack, project):
    write(project, "fail.py", "import sys\nprint('failing')\nsys.exit(3)\n")
    done = stack.div("run", "--gpu", "cpu", "fail.py", cwd=project)
    assert done.returncode == 3
    assert done.stdout == b"failing\n"
    assert re.fullmatch(r"run-\w+ failed after \d+s with exit code 3 and spent \$0\.01",
                        lines(done)[-1])
    # Only the run's own stderr: nothing of srun's "task 0: Exited ...".
    assert b"srun" not in done.stderr


def test_streams_are_separate_and_byte_exact(stack, project):
    """10 MB of arbitrary bytes on stdout, lines on stderr, no trailing newline."""
    write(project, "noisy.py", (
        "import os, sys, random\n"
        "random.seed(7)\n"
        "blob = random.randbytes(10_000_000)\n"
        "for i in range(0, len(blob), 65536):\n"
        "    sys.stdout.buffer.write(blob[i:i + 65536])\n"
        "    if i % (65536 * 40) == 0:\n"
        "        print(f'progress {i}', file=sys.stderr, flush=True)\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write('no newline at the end')\n"))
    import random
    random.seed(7)
    expected = random.randbytes(10_000_000)
    done = stack.div("run", "--gpu", "cpu", "--memory", "4", "noisy.py", cwd=project)
    assert done.returncode == 0, done.stderr[-2000:]
    assert hashlib.sha256(done.stdout).hexdigest() == hashlib.sha256(expected).hexdigest()
    log = done.stderr.decode().splitlines()
    progress = [line for line in log if line.startswith("progress")]
    assert progress == [f"progress {i}" for i in range(0, 10_000_000, 65536 * 40)]
    # The run's last bytes as they were; div's own last line on a line of its own.
    assert done.stderr.endswith(f"no newline at the end\n{log[-1]}\n".encode())
    assert log[-1].startswith(f"{run_name(done)} finished in")


def test_detach_then_logs_follow_shows_the_whole_log(stack, project):
    write(project, "slow.py", "import time\nfor i in range(5):\n    print(i, flush=True)\n"
                              "    time.sleep(0.4)\n")
    done = stack.div("run", "--gpu", "cpu", "-d", "slow.py", cwd=project)
    assert done.returncode == 0, done.stderr
    name = done.stdout.decode().strip()
    assert re.fullmatch(r"run-[a-z0-9]{4,}", name)
    assert stack.run_json(name)["status"] in ("queued", "running")
    followed = stack.div("logs", name, "-f", cwd=project)
    assert followed.returncode == 0
    assert followed.stdout == b"0\n1\n2\n3\n4\n"
    assert lines(followed)[-1].startswith(f"{name} finished in")
    # Without -f: what is there, and out.
    again = stack.div("logs", name, cwd=project)
    assert (again.returncode, again.stdout) == (0, b"0\n1\n2\n3\n4\n")


def test_detach_json_prints_the_run(stack, project):
    import json
    write(project, "a.py", "print(1)\n")
    done = stack.div("run", "--gpu", "cpu", "-d", "--json", "--name", "json-detached",
                     "--env", "LR=3e-4", "a.py", cwd=project)
    run = json.loads(done.stdout)
    assert run["name"] == "json-detached" and run["env"] == {"LR": "3e-4"}
    assert run["status"] in ("queued", "running") and run["rate"] == "0.30"


def test_an_image_the_site_does_not_use_is_said_once_before_upload(stack, project):
    import json
    write(project, "a.py", "print(1)\n")
    done = stack.div("run", "--gpu", "cpu", "-d", "--json", "--image", "python:3.12", "a.py",
                     cwd=project)
    assert done.returncode == 0, done.stderr
    said = lines(done)
    note = ("note: this site runs commands without a container runtime: --image python:3.12 "
            "is not used; the run gets the nodes' own software")
    # Once, before the upload line.
    assert said.count(note) == 1 and said.index(note) == 0, said
    run = json.loads(done.stdout)
    assert run["image_used"] is False
    page = stack.dashboard_session("e2e-user", "image-test-password").get(
        f"{stack.url}/runs/{run['name']}").text
    assert "not used: this site runs commands without a container runtime" in page
    # The default image is never worth a word.
    quiet = stack.div("run", "--gpu", "cpu", "-d", "a.py", cwd=project)
    assert "note:" not in quiet.stderr.decode()


def test_json_prints_the_run_when_it_ends_alone_on_stdout(stack, project):
    import json
    write(project, "a.py", "print('out')\n")
    done = stack.div("run", "--gpu", "l40s", "--gpus", "2", "--json", "a.py", cwd=project)
    assert done.returncode == 0
    # stdout is one JSON document (a cron job appends it to a .jsonl file);
    # the run's own stdout went to stderr, and stderr says so.
    run = json.loads(done.stdout)
    assert b"\nout\n" in done.stderr and b"the run's stdout follows on stderr" in done.stderr
    assert (run["status"], run["exit_code"], run["gpu"], run["gpus"]) == ("succeeded", 0, "l40s", 2)
    assert (run["rate"], run["cost"], run["cpu"], run["memory"]) == ("5.10", "0.085", 2, 16)


def test_sigint_detaches_and_the_run_goes_on(stack, project):
    write(project, "long.py", "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "long.py"],
                            cwd=project, env=stack.div_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            preexec_fn=interrupt_as_a_terminal_does)
    assert proc.stdout.readline() == b"started\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    text = err.decode()
    name = re.search(r"div logs (run-\w+) -f", text).group(1)
    assert f"div stop {name}" in text
    assert stack.wait_for_status(name, "running")["status"] == "running"

    stopped = stack.div("stop", name, cwd=project)
    assert stopped.returncode == 0
    followed = stack.div("logs", name, "-f", cwd=project)
    assert followed.returncode == 1
    assert re.fullmatch(rf"{name} was canceled after \d+s and spent \$0\.01", lines(followed)[-1])
    assert stack.run_json(name)["status"] == "canceled"


def test_div_stop_ends_div_run_with_exit_code_1(stack, project):
    write(project, "long.py", "import time\nprint('started', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--name", "to-stop",
                             "long.py"], cwd=project, env=stack.div_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"started\n"
    assert stack.div("stop", "to-stop", cwd=project).returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.decode().splitlines()[-1].startswith("to-stop was canceled after")


def test_server_restart_mid_stream_loses_nothing(stack, project):
    write(project, "count.py", "import time\nfor i in range(40):\n    print(f'line {i}', flush=True)\n"
                               "    time.sleep(0.15)\n")
    # Unbuffered: readline must not take bytes that communicate() then never sees.
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "count.py"],
                            cwd=project, env=stack.div_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    assert proc.stdout.readline() == b"line 0\n"
    stack.services("stop", "server")
    time.sleep(2)
    stack.services("start", "server")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert b"line 0\n" + out == b"".join(f"line {i}\n".encode() for i in range(40))


def test_unchanged_code_uploads_no_bytes(stack, project):
    for i in range(30):
        write(project, f"pkg/mod{i}.py", f"VALUE = {i}\n" * 100)
    write(project, "main.py", "import pkg.mod7 as m\nprint(m.VALUE)\n")

    def blob_puts() -> int:
        return stack.server_log.read_text().count("PUT /api/v1/code/blobs/")

    before = blob_puts()
    first = stack.div("run", "--gpu", "cpu", "main.py", cwd=project)
    assert (first.returncode, first.stdout) == (0, b"7\n")
    assert blob_puts() - before == 31
    before = blob_puts()
    second = stack.div("run", "--gpu", "cpu", "main.py", cwd=project)
    assert (second.returncode, second.stdout) == (0, b"7\n")
    assert blob_puts() == before
    assert lines(first)[0] == lines(second)[0]
    # One changed file: one blob goes up, and a new tree.
    write(project, "pkg/mod7.py", "VALUE = 'seven'\n")
    third = stack.div("run", "--gpu", "cpu", "main.py", cwd=project)
    assert third.stdout == b"seven\n" and blob_puts() == before + 1
    assert lines(third)[0] != lines(second)[0]


def test_git_repository_uploads_what_git_lists(stack, project):
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    write(project, ".gitignore", "data/\n*.log\n")
    write(project, "train.py", "import os\nprint(sorted(os.listdir('.')))\n")
    write(project, "data/big.bin", "x" * 1000)
    write(project, "debug.log", "noise")
    subprocess.run([*git, "add", "train.py", ".gitignore"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=project, check=True)
    write(project, "untracked.py", "")
    write(project, ".env.local", "TOKEN=secret")
    done = stack.div("run", "--gpu", "cpu", "train.py", cwd=project)
    assert done.stdout == b"['.env.local', '.gitignore', 'train.py', 'untracked.py']\n", \
        done.stderr
    # Git's view rules, but a .env file it would upload is said first.
    assert lines(done)[0] == ("warning: uploading .env.local: untracked and not in .gitignore "
                              "(add it there to keep it off the cluster)")


def test_outside_git_the_docs_exclusions_apply(stack, project):
    write(project, "train.py", "import os\nprint(sorted(os.listdir('.')))\n")
    for excluded in (".env", ".env.local", "x.pyc", ".DS_Store", "node_modules/a.js",
                     "__pycache__/m.pyc", ".venv/bin/python", "venv/x", "dist/w.whl",
                     ".next/x", ".git/HEAD", ".pytest_cache/x"):
        write(project, excluded, "secret")
    write(project, "keep/config.env", "")
    done = stack.div("run", "--gpu", "cpu", "train.py", cwd=project)
    assert done.stdout == b"['keep', 'train.py']\n", done.stderr


def test_a_folder_with_nothing_to_upload_is_an_error(stack, project):
    write(project, ".env", "SECRET=1")
    done = stack.div("run", "--gpu", "cpu", "train.py", cwd=project)
    assert done.returncode == 2
    assert b"nothing to upload" in done.stderr
    none = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "ls /workspace | wc -l",
                     cwd=project)
    assert (none.returncode, none.stdout) == (0, b"0\n")
    assert lines(none)[0].startswith("run-")   # no upload line


def test_volumes_named_in_the_command_exist_before_the_run(stack, project):
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--",
                     "mkdir -p /mnt/ckpts/lora-v1 && echo w > /mnt/ckpts/lora-v1/final",
                     cwd=project)
    assert done.returncode == 0, done.stderr
    saved = stack.data_dir / "share" / "e2e" / "ckpts" / "lora-v1" / "final"
    assert saved.read_text() == "w\n"
    assert b"was lost" not in done.stderr


def test_gpus_16_runs_once_on_each_of_two_nodes(stack, project):
    done = stack.div("run", "--gpu", "h100", "--gpus", "16", "--no-upload", "--",
                     'echo "rank=$NODE_RANK of $NNODES master=$MASTER_ADDR host=$(hostname)"',
                     cwd=project)
    assert done.returncode == 0, done.stderr
    # Whichever two nodes Slurm picks: the first is rank 0 and the master.
    ranks = [re.fullmatch(r"rank=(\d) of 2 master=(node\d) host=(node\d)", line).groups()
             for line in sorted(done.stdout.decode().splitlines())]
    assert [rank for rank, _, _ in ranks] == ["0", "1"]
    assert ranks[0][1] == ranks[1][1] == ranks[0][2] != ranks[1][2]
    assert re.fullmatch(r"run-\w+ 16 x H100 \$76.80/h no spend limit", lines(done)[0])


def test_another_orgs_key_cannot_see_or_stop_a_run(stack, project):
    write(project, "long.py", "import time\ntime.sleep(30)\n")
    done = stack.div("run", "--gpu", "cpu", "-d", "long.py", cwd=project)
    name = done.stdout.decode().strip()
    for method, path in (("GET", f"/runs/{name}"), ("POST", f"/runs/{name}/stop"),
                         ("GET", f"/runs/{name}/logs")):
        answer = stack.api(method, path, org="other")
        assert answer.status_code == 404, (method, path)
    assert name not in stack.api("GET", "/runs", org="other").text
    assert stack.div("stop", name, cwd=project, org="other").returncode == 1
    assert stack.run_json(name)["status"] in ("queued", "running")
    assert name in stack.div("ls", cwd=project).stdout.decode()
    stack.div("stop", name, cwd=project)


def test_no_api_key_exits_2_and_says_how_to_get_one(stack, project, tmp_path):
    write(project, "a.py", "print(1)\n")
    env = stack.div_env(home=tmp_path)
    del env["DIV_TOKEN"]
    done = stack.div("run", "a.py", cwd=project, env=env)
    assert done.returncode == 2
    assert b"no API key" in done.stderr and b"div login" in done.stderr


def test_login_stores_the_key_and_precedence_is_flag_env_file(stack, project, tmp_path):
    env = stack.div_env(home=tmp_path)
    del env["DIV_TOKEN"], env["DIV_API_URL"]
    bad = stack.div("login", "--api-url", stack.url, "--token", "div_0_bad", cwd=project, env=env)
    assert bad.returncode == 1 and not (tmp_path / ".config/div/config.toml").exists()
    good = stack.div("login", "--api-url", stack.url, "--token", stack.tokens["e2e"],
                     cwd=project, env=env)
    assert good.returncode == 0, good.stderr
    config = tmp_path / ".config/div/config.toml"
    assert oct(config.stat().st_mode & 0o777) == "0o600"
    assert stack.div("ls", cwd=project, env=env).returncode == 0        # file
    env["DIV_TOKEN"] = "div_0_wrong"
    assert stack.div("ls", cwd=project, env=env).returncode == 1        # env beats file
    ok = stack.div("ls", "--token", stack.tokens["e2e"], cwd=project, env=env)
    assert ok.returncode == 0                                            # flag beats env


def test_the_reconciler_can_restart_at_any_time(stack, project):
    """Its state is the database and Slurm: a run that ends while it is down
    is settled when it comes back, and a second one stands by."""
    stack.services("stop", "reconciler")
    try:
        done = stack.div("run", "--gpu", "cpu", "-d", "--no-upload", "--", "echo $((6 * 7)); exit 4",
                         cwd=project)
        name = done.stdout.decode().strip()
        # Ended in Slurm's record (however busy the cluster), never settled.
        wait_for_end(SlurmClient(), stack.run_json(name)["slurm_job_id"])
        assert stack.run_json(name)["status"] == "queued"
        standby = stack.flask("reconcile", "--once", check=False)
        assert standby.returncode == 0 and "runs changed" in standby.stdout, standby.stderr
        # Settled by that one cycle (another test's run may have been too).
        assert stack.run_json(name)["status"] == "failed"
    finally:
        stack.services("start", "reconciler")
    followed = stack.div("logs", name, "-f", cwd=project)
    assert (followed.returncode, followed.stdout) == (4, b"42\n")
    # While one acts, another does nothing.
    time.sleep(1)
    second = stack.flask("reconcile", "--once", check=False)
    assert second.returncode == 1 and "another reconciler is acting" in second.stderr


def test_dev_bootstrap_writes_a_working_env_file_and_keeps_its_key(stack, project, tmp_path):
    env_file = stack.private_folder("bootstrap") / ".div-dev.env"
    first = stack.flask("dev-bootstrap", "--env-file", str(env_file), "--api-url", stack.url)
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    values = dict(line.split("=", 1) for line in env_file.read_text().split())
    assert values["DIV_API_URL"] == stack.url
    assert (f"div login --api-url {stack.url} --token {values['DIV_TOKEN']}"
            in first.stdout)
    env = stack.div_env(home=tmp_path)
    env.update(values)
    assert stack.div("ls", cwd=project, env=env).returncode == 0
    stack.flask("dev-bootstrap", "--env-file", str(env_file), "--api-url", stack.url)
    assert dict(line.split("=", 1) for line in env_file.read_text().split()) == values
    # What `make up` leaves is whole: the doctor finds nothing wrong, and the
    # dev user owns the dev cluster.
    assert b"(site_admin)" in stack.div("whoami", cwd=project, env=env).stdout
    doctor = stack.flask("doctor", check=False)
    assert doctor.returncode == 0, doctor.stdout


@pytest.fixture(scope="module")
def slow_cycles(slurm_cluster):
    """A stack whose reconciler cycles a minute apart."""
    with running_stack(free_port(), None, settings={"DIV_RECONCILE_INTERVAL": "60"}) as running:
        yield running


def test_the_end_is_heard_when_the_command_exits_not_at_the_next_cycle(slow_cycles, project):
    """The follower sees the run's exit file and the reconciler settles the
    run from Slurm's final record at once: `div run` ends with the run's
    exit code and the cost the bill keeps, a minute before the next cycle
    would have told it. Each function starts and ends within a second,
    where slurmdbd's record has a placeholder name for a moment."""
    write(project, "t.py", "import sys\ndef ok():\n    print('hi')\n"
                           "def bad():\n    sys.exit(3)\n")
    for entrypoint, code, word in (("t.py::ok", 0, "finished"), ("t.py::bad", 3, "failed")):
        started = time.monotonic()
        done = slow_cycles.div("run", "--gpu", "cpu", entrypoint, cwd=project, timeout=120)
        assert time.monotonic() - started < 30, lines(done)
        assert done.returncode == code, done.stderr
        last = lines(done)[-1]
        assert re.fullmatch(rf"run-\w+ {word} .*spent \$(\d+\.\d\d)", last), last
        run = slow_cycles.run_json(run_name(done))
        # The line's figure is the bill's, rounded to the cent.
        assert last.endswith(format_usd(int(Decimal(run["cost"]) * 1_000_000)))
        assert run["status"] == ("succeeded" if code == 0 else "failed")
