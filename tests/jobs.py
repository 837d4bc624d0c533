"""Building JobSpecs for the cluster tests."""
from __future__ import annotations

import time

from divergent.slurm.client import SlurmClient
from divergent.slurm.jobspec import JobSpec, SlurmSite

# The dev cluster's Python lives in /usr: runtime `none` needs nothing more.
SITE = SlurmSite()


def spec_for(job_dirs, command: str, **overrides) -> JobSpec:
    state, volumes, code = job_dirs
    fields = dict(run_name="run-test", account="dev", gpu_type="cpu", gpus=1, cpus=1,
                  memory_gib=1, command=command, state_dir=str(state),
                  volumes_dir=str(volumes), code_dir=str(code), project="tests")
    fields.update(overrides)
    return JobSpec(**fields)


def wait_for_end(slurm: SlurmClient, job_id: str, timeout: float = 60):
    """Polls until sacct has the job's end, as the reconciler does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = slurm.query([job_id]).get(job_id)
        if record is not None and record.finished:
            return record
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not end within {timeout} s")
