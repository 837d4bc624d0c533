"""The core end to end on a site unlike the docs' cluster: the dev cluster's
second profile (DIV_DEV_PROFILE=site2: typed A100 nodes of 4, a node of
untyped GPUs behind `older`, a `gpu` partition with a 30-minute MaxTime,
QoS enforced, accounts made by its admin beforehand). The site is set up as
its admin would: `flask site init --from-slurm --save`, prices, a type
renamed, the QoS, existing accounts. `make test` brings this profile up
after the rest and runs these (`pytest -m site2`)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import time

import pytest

from tests.conftest import POSTGRES_URL
from tests.sshd import free_port
from tests.stack import running_stack

pytestmark = pytest.mark.site2


def set_up_the_site(stack) -> None:
    folder = stack.private_folder("site")
    stack.settings.update(DIV_SITE_FILE=str(folder / "site.toml"),
                          DIV_PRICES_FILE=str(folder / "prices.toml"))
    proposal = stack.flask("site", "init", "--from-slurm", "--save").stdout
    assert "a100   gpu         a100                  4" in proposal, proposal
    stack.flask("site", "gpu", "rm", "older")
    stack.flask("site", "gpu", "add", "rtx6000", "--partition", "older", "--gres", "gpu",
                "--per-node", "2", "--price", "1.20", "--node-cores", "16", "--node-memory", "128")
    stack.flask("prices", "--set", "a100=3.00")
    stack.flask("site", "--qos", "div", "--accounts", "existing")


@pytest.fixture(scope="module")
def site2(slurm_cluster):
    partitions = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True)
    assert {"gpu", "older", "batch"} <= set(partitions.stdout.split()), (
        "the dev cluster is not the site2 profile: DIV_DEV_PROFILE=site2 slurm/dev/up "
        "(make test does)\n" + partitions.stdout)
    with running_stack(free_port(), POSTGRES_URL, database="divergent_site2",
                       accounts={"e2e": "lab-e2e", "other": "lab-other"},
                       before_start=set_up_the_site) as stack:
        yield stack


def test_a_run_on_typed_gpus_prints_bills_and_exits_as_on_the_docs_cluster(site2, project):
    (project / "train.py").write_text("def run():\n    print('a100 says hi')\n")
    done = site2.div("run", "--gpu", "a100", "--max-spend", "5", "train.py::run", cwd=project)
    assert done.returncode == 0 and done.stdout == b"a100 says hi\n", done.stderr
    header = done.stderr.decode().splitlines()[1]
    # $5 of an A100 at $3.00/h is 1h 40m; the partition's MaxTime is 30 minutes.
    assert header.endswith("A100 $3.00/h max spend $5.00; the partition's time limit ends it "
                           "after about 30m"), header
    failed = site2.div("run", "--gpu", "a100", "--no-upload", "--", "sh", "-c", "exit 3",
                       cwd=project)
    assert failed.returncode == 3


def test_eight_a100s_are_two_nodes_of_four_and_the_untyped_gpus_are_the_older_nodes(
        site2, project):
    two = site2.div("run", "--gpu", "a100", "--gpus", "8", "--no-upload", "--", "sh", "-c",
                    "echo $NODE_RANK of $NNODES on $(hostname)", cwd=project)
    assert two.returncode == 0, two.stderr
    assert sorted(two.stdout.decode().splitlines()) == ["0 of 2 on node1", "1 of 2 on node2"]
    refused = site2.div("run", "--gpu", "a100", "--gpus", "6", "--no-upload", "--", "true",
                        cwd=project)
    assert refused.returncode == 2 and b"whole nodes of 4" in refused.stderr
    older = site2.div("run", "--gpu", "rtx6000", "--gpus", "2", "--no-upload", "--", "sh", "-c",
                      "hostname; echo $CUDA_VISIBLE_DEVICES", cwd=project)
    assert older.returncode == 0 and older.stdout.decode().split() == ["node3", "0,1"], older


def test_logs_storage_and_charges_agree_with_sacct(site2, project, tmp_path):
    name = site2.div("run", "--gpu", "cpu", "--no-upload", "-d", "--", "echo", "logged",
                     cwd=project).stdout.decode().strip()
    follow = site2.div("logs", name, "-f", cwd=project)
    assert follow.returncode == 0 and follow.stdout == b"logged\n", follow.stderr
    data = os.urandom(2**20)
    (tmp_path / "w.bin").write_bytes(data)
    assert site2.div("storage", "put", "weights", "w.bin", cwd=tmp_path).returncode == 0
    assert site2.div("storage", "get", "weights", "w.bin", str(tmp_path / "back"),
                     cwd=tmp_path).returncode == 0
    assert hashlib.sha256((tmp_path / "back").read_bytes()).digest() == \
        hashlib.sha256(data).digest()
    charges = site2.flask("charges", check=False)
    assert charges.returncode == 0 and charges.stdout.rstrip().endswith("difference $0.00"), \
        charges.stdout + charges.stderr


def test_an_org_whose_account_the_site_never_made_is_refused_in_one_line(site2, project):
    site2.add_org("stray")           # its account, "stray", was never made
    done = site2.div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=project, org="stray")
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "Invalid account" in lines[0] and "flask org-account ORG ACCOUNT" in lines[0]


def _assoc_limit(user: str, account: str) -> str:
    shown = subprocess.run(["scontrol", "show", "assoc_mgr", "flags=assoc", f"users={user}",
                            f"accounts={account}"], capture_output=True, text=True).stdout
    return shown.split("MaxSubmitJobs=", 1)[1].split("(", 1)[0] if "MaxSubmitJobs=" in shown else ""


def test_slurms_own_per_user_limits_hold_for_the_orgs_unix_user(site2, project):
    # The org's user went into lab-e2e on its first run, added by the
    # service user as the account's coordinator: the site's admins limit it
    # as any user of theirs, and Slurm enforces it, server or no server.
    held = site2.div("run", "--gpu", "cpu", "-d", "--no-upload", "--name", "holds-the-one",
                     "--", "sleep 120", cwd=project)
    assert held.returncode == 0, held.stderr
    limit = ["sacctmgr", "-i", "modify", "user", "where", "name=div-e2e", "account=lab-e2e",
             "set"]
    subprocess.run([*limit, "MaxSubmitJobs=1"], capture_output=True, check=True)
    try:
        for _ in range(100):
            if _assoc_limit("div-e2e", "lab-e2e") == "1":
                break
            time.sleep(0.1)
        refused = site2.div("run", "--gpu", "cpu", "--no-upload", "--name", "one-too-many",
                            "--", "true", cwd=project)
        assert refused.returncode == 2, refused.stderr
        assert b"Job violates accounting/QOS policy" in refused.stderr, refused.stderr
        assert site2.api("GET", "/runs/one-too-many").status_code == 404     # not kept
    finally:
        subprocess.run([*limit, "MaxSubmitJobs=-1"], capture_output=True, check=True)
        site2.div("stop", "holds-the-one", cwd=project)
