"""Runs in container images on a site whose runtime is pyxis (NVIDIA's
pyxis and enroot on the dev cluster, images from the dev registries): the
core end to end in an image (exit codes, logs as written, the code at
/workspace, volumes at /mnt, secrets, metrics, torchrun on two nodes, S3
copies, sweeps), the first pull said in the log, images the site cannot
run refused before anything is uploaded, a pull that fails costing
nothing, and flask doctor's look at the nodes."""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from tests.buckets import new_bucket, put_objects, s3_client
from tests.conftest import DEV_STATE, IMAGE, PRIVATE_REGISTRY, REGISTRY, S3_SECRETS
from tests.images import manifest_digest
from tests.interactive import Tmux
from tests.stack import VENV_BIN
from tests.test_distributed import ALL_REDUCE, worlds

IMAGE_CACHE = DEV_STATE / "images"
PULL_TEST = f"{REGISTRY}/div/pull-test:1"
UPLOADED = re.compile(r"^\d+ files?, .* → ", re.M)


def run(stack, project, *args: str, org: str = "e2e", timeout: float = 180):
    done = stack.div("run", "--gpu", "cpu", *args, cwd=project, org=org, timeout=timeout)
    return done, done.stdout.decode(), done.stderr.decode()


PROGRAM = """\
import json, os, sys
# The nodes have torch under /usr/local; div/python:3.11 does not.
print("cwd", os.getcwd(), "torch" if os.path.isdir("/usr/local/lib/python3.11/dist-packages/torch")
      else "no torch", "token", os.environ["IMG_TOKEN"] == "s3cret-token")
print("to stderr", file=sys.stderr)
try:
    open("/mnt/very-cool-classifier-code/code/planted.py", "w")
except OSError as exc:
    print("stored code", exc.strerror)
os.makedirs("/mnt/img-out/run", exist_ok=True)
with open("/mnt/img-out/run/result.txt", "w") as f:
    f.write("written in the image\\n")
with open(os.environ["DIV_METRICS"], "a") as f:
    f.write(json.dumps({"loss": 0.25}) + "\\n")
sys.exit(int(sys.argv[1]))
"""


def test_a_run_in_an_image_prints_writes_and_exits_as_on_none(pyxis_stack, project, tmp_path):
    assert pyxis_stack.div("secrets", "set", "IMG_TOKEN", cwd=project,
                           input=b"s3cret-token").returncode == 0
    (project / "main.py").write_text(PROGRAM)
    done, out, err = run(pyxis_stack, project, "--image", IMAGE, "--secret", "IMG_TOKEN",
                         "--check", "metrics.loss<=0.3", "--name", "in-image", "--",
                         "mkdir -p /mnt/img-out && python main.py 3")
    assert done.returncode == 3, err
    assert out == "cwd /workspace no torch token True\nstored code Read-only file system\n"
    assert "to stderr\n" in err
    assert err.splitlines()[-1].startswith("in-image failed after ")
    record = pyxis_stack.run_json("in-image")
    assert record["image"] == IMAGE and record["exit_code"] == 3
    assert [c["verdict"] for c in record["checks"]] == ["passed"]
    got = pyxis_stack.div("storage", "get", "img-out", "run/result.txt", str(tmp_path / "r"),
                          cwd=project)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "r").read_text() == "written in the image\n"
    # The docs' default image comes through the site's mirror.
    default, out, err = run(pyxis_stack, project, "--no-upload", "--",
                            "python -c 'import torch; print(torch.ones(2).sum().item())'")
    assert default.returncode == 0 and out == "2.0\n", err


def cached_file(image: str) -> Path:
    """The nodes' file of a public image: named by its registry and digest,
    as image-pull names it."""
    key = f"{image.partition('/')[0]}#{manifest_digest(image)}"
    return IMAGE_CACHE / "shared" / f"{hashlib.sha256(key.encode()).hexdigest()}.sqsh"


def test_the_first_pull_is_said_once_and_the_image_is_kept(pyxis_stack, project):
    cached_file(PULL_TEST).unlink(missing_ok=True)
    first, out, err = run(pyxis_stack, project, "--no-upload", "--image", PULL_TEST, "--",
                          "echo pulled")
    assert first.returncode == 0 and out == "pulled\n", err
    said = [line for line in err.splitlines() if line.startswith("divergent: pulling")]
    assert len(said) == 1 and re.fullmatch(
        rf"divergent: pulling {re.escape(PULL_TEST)} on node\d \(\d+\.\d MB\)", said[0]), err
    assert cached_file(PULL_TEST).is_file()
    again, out, err = run(pyxis_stack, project, "--no-upload", "--image", PULL_TEST, "--",
                          "echo cached")
    assert again.returncode == 0 and out == "cached\n" and "pulling" not in err, err


def test_torchrun_forms_one_world_on_two_nodes_in_the_torch_image(pyxis_stack, project):
    (project / "ddp.py").write_text(ALL_REDUCE)
    done = pyxis_stack.div("run", "--gpu", "h100", "--gpus", "16", "--image",
                           f"{REGISTRY}/div/torch:2.13", "--", "torchrun --nproc-per-node 2 ddp.py",
                           cwd=project, timeout=300)
    assert done.returncode == 0, done.stderr
    ranks = worlds(done.stdout)
    assert [r[:2] for r in ranks] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert {r[3] for r in ranks} == {10} and ranks[0][2] != ranks[2][2]


def test_a_sweep_runs_each_member_in_the_image(pyxis_stack, project):
    (project / "eval.py").write_text("import os, numpy\nprint('n', os.environ['N'], "
                                     "numpy.array([int(os.environ['N'])]).sum())\n")
    done, out, err = run(pyxis_stack, project, "--image", IMAGE, "--sweep", "N=1,2", "--",
                         "python eval.py")
    assert done.returncode == 0, err
    members = [line.split()[0] for line in out.splitlines()]
    assert len(members) == 2 and all(line.endswith("succeeded, $0.005")
                                      for line in out.splitlines()), out
    logs = [pyxis_stack.div("logs", member, cwd=project).stdout for member in members]
    assert sorted(logs) == [b"n 1 1\n", b"n 2 2\n"]


def test_an_s3_copy_runs_in_the_sites_transfer_image(pyxis_stack, project, s3_server):
    for name in S3_SECRETS:
        assert pyxis_stack.div("secrets", "set", name, cwd=project,
                               input=s3_server[name].encode()).returncode == 0
    s3 = s3_client(s3_server)
    bucket = new_bucket(s3)
    put_objects(s3, bucket, {"ds/a.txt": b"alpha\n", "ds/b/c.txt": b"gamma\n"})
    done = pyxis_stack.div("storage", "import", "img-s3/in", f"s3://{bucket}/ds", cwd=project,
                           timeout=300)
    assert done.returncode == 0, done.stderr
    name = re.search(r"\b(run-\w+)\b", done.stderr.decode()).group(1)
    assert pyxis_stack.run_json(name)["image"] == IMAGE
    read, out, err = run(pyxis_stack, project, "--no-upload", "--image", IMAGE, "--",
                         "cat /mnt/img-s3/in/a.txt /mnt/img-s3/in/b/c.txt")
    assert read.returncode == 0 and out == "alpha\ngamma\n", err


def test_a_private_registry_takes_the_orgs_login_from_its_secrets(pyxis_stack, project):
    private = f"{PRIVATE_REGISTRY}/div/python:3.11"
    missing, _, err = run(pyxis_stack, project, "--no-upload", "--image", private, "--", "true",
                          org="other")
    assert missing.returncode == 2 and not UPLOADED.search(err), err
    assert err.strip() == (f"{PRIVATE_REGISTRY} takes a login: set the org's secrets "
                           "REGISTRY_USERNAME and REGISTRY_PASSWORD (div secrets set)")
    user, password = (DEV_STATE / "registry-private.login").read_text().strip().split(":", 1)
    for org, secret in (("e2e", password), ("other", "not-the-password")):
        for name, value in (("REGISTRY_USERNAME", user), ("REGISTRY_PASSWORD", secret)):
            assert pyxis_stack.div("secrets", "set", name, cwd=project, org=org,
                                   input=value.encode()).returncode == 0
    (project / "main.py").write_text("print('never')\n")
    refused, _, err = run(pyxis_stack, project, "--image", private, "--", "python main.py",
                          org="other")
    assert refused.returncode == 2 and not UPLOADED.search(err), err
    assert err.strip() == f"image {private}: {PRIVATE_REGISTRY} refused the org's login"
    done, out, err = run(pyxis_stack, project, "--no-upload", "--image", private, "--",
                         "python -c 'print(6 * 7)'")
    assert done.returncode == 0 and out == "42\n", err
    # Neither in the job's environment nor in its script.
    name = err.splitlines()[0].split()[0]
    script = (pyxis_stack.data_dir / f"runs/e2e/{name}/batch.sh").read_text()
    assert password not in script and not (pyxis_stack.data_dir /
                                            f"runs/e2e/{name}/registry.login").exists()


@pytest.mark.parametrize("image, says", [
    (f"{REGISTRY}/div/nothing:1", f"image {REGISTRY}/div/nothing:1: no such image in {REGISTRY}"),
    ("registry.invalid:5000/x:1", "image registry.invalid:5000/x:1: registry.invalid:5000 is not "
     f"one of this site's registries ({REGISTRY}, {PRIVATE_REGISTRY})"),
    ("Not An Image", "Error: Invalid value for --image: 'Not An Image' is not an image "
     "reference"),
])
def test_an_image_the_site_cannot_run_is_refused_before_the_upload(pyxis_stack, project,
                                                                   image, says):
    (project / "main.py").write_text("print('never')\n")
    done, _, err = run(pyxis_stack, project, "--image", image, "--", "python main.py")
    assert done.returncode == 2 and says in err and not UPLOADED.search(err), err


def test_a_login_secret_that_a_shell_would_run_is_refused(pyxis_stack, project):
    canary = Path("/tmp") / f"div-login-canary-{os.getpid()}"
    for name, value in (("REGISTRY_USERNAME", "dev"), ("REGISTRY_PASSWORD", f"$(touch {canary})")):
        assert pyxis_stack.div("secrets", "set", name, cwd=project, org="other",
                               input=value.encode()).returncode == 0
    done, _, err = run(pyxis_stack, project, "--no-upload", "--image",
                       f"{PRIVATE_REGISTRY}/div/python:3.11", "--", "true", org="other")
    assert done.returncode == 2 and "hold no login divergent can pass on" in err, err
    assert not canary.exists()


def test_a_pull_the_node_refuses_ends_the_run_at_once_and_costs_nothing(pyxis_stack, project):
    """A registry the server reaches and the site lists, which the nodes do
    not pull from (their IMAGE_REGISTRIES): the image resolves, the pull fails."""
    pyxis_stack.flask("site", "images", "--registry", "127.0.0.1:5000",
                      "--insecure", REGISTRY, "--insecure", PRIVATE_REGISTRY,
                      "--insecure", "127.0.0.1:5000")
    try:
        done, out, err = run(pyxis_stack, project, "--no-upload", "--name", "pull-refused",
                             "--image", "127.0.0.1:5000/div/python:3.11", "--", "echo never")
    finally:
        pyxis_stack.flask("site", "images", "--registry", REGISTRY, "--insecure", REGISTRY,
                          "--insecure", PRIVATE_REGISTRY)
    assert done.returncode == 125 and out == "", err
    failed = [line for line in err.splitlines() if line.startswith("divergent: could not pull")]
    assert len(failed) == 1 and re.fullmatch(
        r"divergent: could not pull 127\.0\.0\.1:5000/div/python:3\.11 on node\d: 127\.0\.0\.1:5000 "
        r"is not a registry this node pulls from \(IMAGE_REGISTRIES in "
        r"/etc/slurm/divergent-node\.conf\)", failed[0]), err
    record = pyxis_stack.wait_for_status("pull-refused", "failed")
    assert record["cost"] == "0.00" and record["exit_code"] == 125, record


def test_the_doctor_checks_the_runtime_on_a_node_of_each_partition(pyxis_stack):
    healthy = pyxis_stack.flask("doctor", check=False)
    line = next(line for line in healthy.stdout.splitlines() if " runtime: " in line)
    assert line.startswith("ok  runtime: pyxis: node") and "enroot 4.1.2" in line, healthy.stdout
    apptainer = pyxis_stack.flask("site", "--runtime", "apptainer")
    try:
        sick = pyxis_stack.flask("doctor", check=False)
    finally:
        pyxis_stack.flask("site", "--runtime", "pyxis")
    assert apptainer.returncode == 0 and sick.returncode == 1
    line = next(line for line in sick.stdout.splitlines() if " runtime: " in line)
    assert line.startswith("BAD runtime: apptainer is not ready on partition ") and \
        "apptainer" in line.split(": ", 2)[2], sick.stdout


def test_a_shell_runs_in_the_image_and_its_exit_ends_the_run(pyxis_stack, project):
    """div shell on a site whose runtime is pyxis: the terminal program on
    the image's Python, the shell in the image."""
    term = Tmux([str(VENV_BIN / "div"), "shell", "--gpu", "cpu", "--image", IMAGE, "--name",
                 "img-shell"], project, pyxis_stack.div_env())
    try:
        term.wait_for("$ ", timeout=120)
        term.line("test -e /usr/lib/python3/dist-packages/numpy && echo numpy-$((1 + 1))")
        term.wait_for("numpy-2")
        term.line("ls /etc/slurm; exit 5")
        assert term.exit_code(timeout=60) == 5
    finally:
        term.close()
    run = pyxis_stack.wait_for_status("img-shell", "failed")
    assert (run["kind"], run["exit_code"]) == ("shell", 5)
