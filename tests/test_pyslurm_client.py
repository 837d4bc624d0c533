"""The pyslurm transport's reading of our batch scripts: every directive
script.py writes becomes the submission's, as sbatch would make it, and
anything it does not know is refused, never dropped. (Against the cluster,
tests/test_slurm_cluster.py runs it beside the commands.)"""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

from divergent.slurm.client import SlurmError
from divergent.slurm.pyslurm_client import series, submit_options
from divergent.slurm.script import render_batch_script
from tests.jobs import SITE, spec_for


def test_every_directive_we_write_becomes_the_submissions(tmp_path):
    dirs = [tmp_path / d for d in ("state", "org", "code")]
    spec = spec_for(dirs, "true", gpu_type="h100", gpus=16, cpus=4, memory_gib=32,
                    time_limit_minutes=62)
    options = submit_options(render_batch_script(spec, SITE))
    environment = options.pop("environment")
    umask = os.umask(0)
    os.umask(umask)
    assert options == {
        "name": "div-run-test", "account": "dev", "partitions": "h100", "nodes": "2",
        "ntasks_per_node": 1, "ntasks": 2, "gres_per_node": "gpu:h100:8", "cpus_per_task": 2,
        "memory_per_node": "16G", "time_limit": 62, "working_directory": str(dirs[0]),
        "standard_output": f"{dirs[0]}/slurm.log", "standard_error": f"{dirs[0]}/slurm.log",
        "log_files_open_mode": "append", "is_requeueable": True, "signal": {"signal": 10, "time": 45},
        "get_user_environment": True}
    # As sbatch --export=NONE sets them: nothing of this process's own.
    assert environment == {
        "SLURM_EXPORT_ENV": "NONE", "SLURM_JOB_NAME": "div-run-test",
        "SLURM_PRIO_PROCESS": str(os.getpriority(os.PRIO_PROCESS, 0)),
        "SLURM_SUBMIT_DIR": os.getcwd(), "SLURM_SUBMIT_HOST": os.uname().nodename,
        "SLURM_UMASK": f"{umask:04o}", "SLURM_CPUS_PER_TASK": "2",
        "SLURM_NTASKS_PER_NODE": "1", "SLURM_OPEN_MODE": "a"}


def test_a_runs_wait_for_its_copies_becomes_the_submissions(tmp_path):
    dirs = [tmp_path / d for d in ("state", "org", "code")]
    options = submit_options(render_batch_script(spec_for(dirs, "true", after_jobs=("7", "8")), SITE))
    assert options["dependencies"] == "afterok:7:8" and options["kill_on_invalid_dependency"] is True


def test_an_org_alone_on_its_nodes_is_pyslurms_mcs_sharing(tmp_path):
    dirs = [tmp_path / d for d in ("state", "org", "code")]
    site = replace(SITE, org_nodes="exclusive")
    options = submit_options(render_batch_script(spec_for(dirs, "true"), site))
    assert options["resource_sharing"] == "mcs"


@pytest.mark.parametrize("line, message", [
    ("#SBATCH --mail-user=x", "cannot submit a script with #SBATCH --mail-user"),
    ("#SBATCH --export=ALL", "the script must say #SBATCH --export=NONE"),
])
def test_what_we_do_not_write_is_refused_not_dropped(line, message):
    script = "#!/bin/bash\n#SBATCH --job-name=x\n" + line + "\ntrue\n"
    with pytest.raises(SlurmError, match=message):
        submit_options(script)


def test_pyslurm_and_slurm_releases_name_the_same_series():
    assert series("22.05.8") == series("22.5.3") == "22.5"
    assert series("25.11.0") == "25.11" != series("24.11.1")
