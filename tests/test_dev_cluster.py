"""The dev cluster itself: what slurm/dev/up promises."""
from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from divergent.slurm.script import render_batch_script
from tests.conftest import DEV_STATE
from tests.jobs import SITE, spec_for, wait_for_end

UP = Path(__file__).resolve().parent.parent / "slurm" / "dev" / "up"


def _pids() -> dict[str, str]:
    return {p.name: p.read_text() for p in (DEV_STATE / "run").glob("*.up.pid")}


@pytest.mark.cluster_wide   # runs slurm/dev/up again
def test_a_second_up_changes_nothing(slurm_cluster):
    before = _pids()
    config = Path("/etc/slurm/slurm.conf").stat().st_mtime_ns
    done = subprocess.run([str(UP)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "starting" not in done.stderr and "wrote" not in done.stderr
    assert _pids() == before and len(before) >= 4
    assert Path("/etc/slurm/slurm.conf").stat().st_mtime_ns == config


def test_slurmdbd_outlives_a_long_lock_wait_in_its_database(slurm_cluster):
    # slurmdbd exits on MariaDB's first lock wait timeout (50 s by default):
    # parallel account making once took it down for the rest of a CI run.
    waited = subprocess.run(["mariadb", "-h", "127.0.0.1", "-u", "root", "-N", "-e",
                             "select @@global.innodb_lock_wait_timeout"],
                            capture_output=True, text=True, check=True).stdout
    assert int(waited) >= 900


def test_every_node_declares_the_gpus_cores_and_memory_the_product_sells(slurm_cluster):
    nodes = subprocess.run(["sinfo", "-h", "-N", "-p", "cpu", "-o", "%N|%c|%m|%G"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert nodes == [f"node{i}|64|344064|gpu:b300:8,gpu:h200:8,gpu:h100:8,gpu:l40s:8"
                     for i in (1, 2, 3, 4)]


def test_a_job_runs_under_an_org_account_the_moment_it_is_made(slurm, job_dirs):
    # A new account each time: sbatch right after sacctmgr is an org's
    # first run, which slurmctld refused while slurmdbd had not yet told it.
    account = f"acme-{uuid.uuid4().hex[:12]}"
    slurm.ensure_account(account)
    job = slurm.submit(render_batch_script(spec_for(job_dirs, "true", account=account), SITE))
    slurm.ensure_account(account)  # a second time is not an error
    assert wait_for_end(slurm, job).state == "COMPLETED"
    recorded = subprocess.run(["sacct", "-n", "-X", "-j", job, "-o", "Account%30"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert recorded == account
