"""A run and its Slurm job as one fact. A run is committed, with the job
name it will have, before sbatch, and its job id after; a server that dies
in between leaves a run without a job id. The reconciler then adopts its
job, found by name in squeue and sacct, or, once no sbatch can still be
running for it, settles it as failed: Slurm never got it."""
from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from flask import current_app

from app.extensions import db
from app.models import Org, Run, utcnow
from app.services.secrets import remove_secrets_file
from app.services.slurm_access import slurm_client
from app.services.volumes import run_dir
from slurm.jobspec import job_name

# A submit in progress has its job id within a second or two.
ADOPT_AFTER = timedelta(seconds=5)
# The slurm_state of a run Slurm never got.
NOT_SUBMITTED = "NOT_SUBMITTED"

log = logging.getLogger("divergent.reconciler")


def _jobs_of(org: Org, runs: list[Run]) -> dict[str, str]:
    """Job ids by job name for runs of one org, from Slurm: jobs submitted
    since the oldest was recorded (a few seconds' slack for clocks), so an
    older job of the same name (a reinstalled server's) is never taken."""
    oldest = min(run.created_at for run in runs)
    return slurm_client().jobs_named([job_name(run.name) for run in runs],
                                     org.slurm_account, int(oldest.timestamp()) - 5)


def adopt_job(run: Run) -> bool:
    """Gives a run without a job id the job Slurm has for it, if any."""
    job_id = _jobs_of(db.session.get(Org, run.org_id), [run]).get(job_name(run.name))
    if job_id is not None:
        _adopt(run, job_id)
    return job_id is not None


def _adopt(run: Run, job_id: str) -> None:
    log.info("%s: adopted job %s, which its submit had not recorded", run.name, job_id)
    run.slurm_job_id = job_id


def settle_without_job(run: Run, status: str) -> None:
    """Ends a run that has no job: canceled before Slurm took it, or failed
    because Slurm never got it. Nothing ran, so nothing is billed."""
    run.status, run.slurm_state = status, NOT_SUBMITTED if status == "failed" else None
    run.ended_at, run.elapsed_seconds, run.cost_micros = utcnow(), 0, 0
    run.pending_reason = None
    if run.secrets_sealed:
        remove_secrets_file(run_dir(db.session.get(Org, run.org_id), run.name))


def settle_unsubmitted() -> int:
    """The reconciler's part: every queued run without a job id past
    ADOPT_AFTER gets its job, or past DIV_SUBMIT_GRACE seconds is failed.
    Returns how many changed."""
    now = utcnow()
    grace = timedelta(seconds=current_app.config["DIV_SUBMIT_GRACE"])
    waiting = list(db.session.execute(db.select(Run).where(
        Run.status == "queued", Run.slurm_job_id.is_(None),
        Run.created_at <= now - ADOPT_AFTER)).scalars())
    by_org: dict[int, list[Run]] = defaultdict(list)
    for run in waiting:
        by_org[run.org_id].append(run)
    changed = 0
    for org_id, runs in by_org.items():
        found = _jobs_of(db.session.get(Org, org_id), runs)
        for run in runs:
            if job_name(run.name) in found:
                _adopt(run, found[job_name(run.name)])
            elif run.created_at <= now - grace:
                log.warning("%s: Slurm never got it (the server stopped while submitting?); "
                            "it is failed", run.name)
                settle_without_job(run, "failed")
            else:
                continue
            changed += 1
    db.session.commit()
    return changed
