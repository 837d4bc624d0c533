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
             ({"project": "p", "command": "true", "max_spend": "0.01"}, "less than a minute"),
             ({"project": "p", "command": "true", "code": "../x/code/12345678"}, "invalid code"),
             ({"project": "../p", "command": "true"}, "invalid project"),
             ({"project": "p", "command": ""}, "needs a command")]
    for body, message in cases:
        answer = stack.api("POST", "/runs", json=body)
        assert answer.status_code == 400, body
        assert message in answer.json()["error"], (body, answer.json())
