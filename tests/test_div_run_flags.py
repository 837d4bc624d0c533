"""Every flag of `div run` is checked before anything is uploaded: a bad one
exits 2 with a message that names the flag and what is allowed."""
from __future__ import annotations

import pytest

BAD_FLAGS = [
    (["--gpu", "a100"], "--gpu", "b300"),
    (["--gpu=k80"], "--gpu", "h100"),
    (["--gpus", "0"], "--gpus", "1"),
    (["--gpus", "12"], "--gpus", "whole nodes"),
    (["--gpus", "two"], "--gpus", "integer"),
    (["--cpu", "65"], "--cpu", "64 cores a node"),
    (["--cpu", "0"], "--cpu", "1"),
    (["--memory", "512M"], "--memory", "64G"),
    (["--memory", "0"], "--memory", "at least 1 GiB"),
    (["--memory", "1.5G"], "--memory", "whole GiB"),
    (["--memory", "400"], "--memory", "336 GiB a node"),
    (["--max-spend", "five"], "--max-spend", "5.00"),
    (["--max-spend", "0"], "--max-spend", "more than $0"),
    (["--max-spend", "1.234"], "--max-spend", "$5"),
    (["--project", "Bad Name"], "--project", "lowercase"),
    (["--name", "-x"], "--name", "lowercase"),
    (["--name", "run;rm -rf /"], "--name", "lowercase"),
    (["--image", "bad image"], "--image", "image reference"),
    (["--env", "NOVALUE"], "--env", "KEY=value"),
    (["--env", "1X=2"], "--env", "KEY=value"),
    (["--check", "accuracy"], "--check", "<path><operator><value>"),
    (["--check", "metrics.loss<low"], "--check", "needs a number"),
    (["--telemetry", "missing.toml"], "--telemetry", "does not exist"),
    (["--volume", ".hidden"], "--volume", "lowercase"),
    (["--nodes", "2"], "--nodes", "No such option"),
    (["models/lora.py::not-a-name"], "entrypoint", "path/to/file.py::function"),
    ([], "", "say what to run"),
]


@pytest.mark.parametrize("args,flag,allowed", BAD_FLAGS, ids=[" ".join(a[0]) or "nothing"
                                                             for a in BAD_FLAGS])
def test_a_bad_flag_exits_2_naming_it_and_uploads_nothing(stack, project, args, flag, allowed):
    (project / "train.py").write_text("print('never runs')\n")
    before = len(stack.server_log.read_text().splitlines())
    words = args if args and args[0].endswith("::not-a-name") or not args else [*args, "train.py"]
    done = stack.div("run", *words, cwd=project)
    message = done.stderr.decode()
    assert done.returncode == 2, message
    assert flag in message and allowed in message, message
    # At most the cluster's catalog was read (what a node holds is the
    # server's to say): nothing was checked, uploaded or started.
    asked = stack.server_log.read_text().splitlines()[before:]
    assert all('"GET /api/v1/catalog ' in line for line in asked), asked


MISSING_ENTRYPOINTS = [
    (["finetune.py::lora"], "finetune.py is not there"),
    (["train.py::lora"], "train.py defines no lora at its top level"),
    (["ignored.py"], "ignored.py is not uploaded (git ignores it)"),
]


@pytest.mark.parametrize("args,message", MISSING_ENTRYPOINTS, ids=[a[0][0] for a in MISSING_ENTRYPOINTS])
def test_an_entrypoint_that_is_not_there_costs_nothing(stack, project, args, message):
    """Found by reading the folder (the file is never run): exit 2 before
    the server is asked anything but its catalog."""
    import subprocess
    (project / "train.py").write_text("import os\nif os:\n    def run():\n        print(1)\n")
    (project / "broken.py").write_text("def run(:\n")
    (project / "ignored.py").write_text("print('ignored')\n")
    (project / ".gitignore").write_text("ignored.py\n")
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    before = len(stack.server_log.read_text().splitlines())
    done = stack.div("run", "--gpu", "h200", "--gpus", "16", *args, cwd=project)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr.decode() and "nothing was uploaded" in done.stderr.decode()
    asked = stack.server_log.read_text().splitlines()[before:]
    assert all('"GET /api/v1/catalog ' in line for line in asked), asked
    # A function defined under an `if` at the top level is found; a file
    # this Python cannot parse (newer syntax, say) is the run's to judge.
    started = stack.div("run", "--gpu", "cpu", "-d", "train.py::run", cwd=project)
    assert started.returncode == 0, started.stderr
    unread = stack.div("run", "--gpu", "cpu", "-d", "broken.py::run", cwd=project)
    assert unread.returncode == 0 and b"note: could not check that broken.py defines run" \
        in unread.stderr


def test_a_broken_telemetry_layout_is_refused_before_upload(stack, project):
    (project / "a.py").write_text("print(1)\n")
    (project / "telemetry.toml").write_text("[[chart]]\nmetrics = 'loss'\n")
    before = len(stack.server_log.read_text().splitlines())
    done = stack.div("run", "--gpu", "cpu", "a.py", cwd=project)
    assert done.returncode == 2
    assert "chart 1: metrics must be a list of metric names" in done.stderr.decode()
    asked = stack.server_log.read_text().splitlines()[before:]
    assert not [line for line in asked if "/code/" in line], asked


def test_gpu_h100_and_gpu_equals_h100_are_the_same(stack, project):
    (project / "a.py").write_text("print(1)\n")
    spaced = stack.div("run", "--gpu", "h100", "--name", "spaced", "-d", "--json", "a.py",
                       cwd=project)
    joined = stack.div("run", "--gpu=h100", "--name", "joined", "-d", "--json", "a.py",
                       cwd=project)
    assert spaced.returncode == joined.returncode == 0
    assert stack.run_json("spaced")["rate"] == stack.run_json("joined")["rate"] == "4.80"


def test_cpu_and_memory_price_as_the_docs_example(stack, project):
    (project / "a.py").write_text("print(1)\n")
    done = stack.div("run", "--gpu", "h100", "--cpu", "8", "--memory", "64G", "--max-spend",
                     "$10", "a.py", cwd=project)
    assert done.returncode == 0, done.stderr
    header = done.stderr.decode().splitlines()[1]
    assert header.endswith(" H100, 8 cores, 64 GiB $7.53/h max spend $10.00 (about 1h 19m)")


def test_the_server_checks_again(stack):
    """A client that skips the CLI's checks meets the same rules, as JSON errors."""
    cases = [({"project": "p", "command": "true", "gpu": "a100"}, "gpu must be one of"),
             ({"project": "p", "command": "true", "gpus": 12}, "whole nodes"),
             ({"project": "p", "command": "true", "memory": 0}, "memory must be"),
             ({"project": "p", "command": "true", "env": {"A B": "x"}}, "invalid env"),
             ({"project": "p", "command": "true", "name": "x;y"}, "invalid run name"),
             ({"project": "p", "command": "true", "max_spend": "0.001"}, "whole cents"),
             ({"project": "p", "command": "true", "max_spend": "0.01"},
              "buys less than a minute at $4.80/h: the least is $0.08"),
             ({"project": "p", "command": "true", "telemetry": "[[chart]\nmetrics = 3"},
              "telemetry.toml is not valid TOML"),
             ({"project": "p", "command": "true", "code": "../x/code/12345678"}, "invalid code"),
             ({"project": "../p", "command": "true"}, "invalid project"),
             ({"project": "p", "command": ""}, "needs a command")]
    for body, message in cases:
        answer = stack.api("POST", "/runs", json=body)
        assert answer.status_code == 400, body
        assert message in answer.json()["error"], (body, answer.json())
