"""A run and its Slurm job as one fact. A run is committed, with the job
name it will have, before sbatch, and its job id after; a server that dies
in between leaves a run without a job id. The reconciler then adopts its
job, found by name in squeue and sacct, or, once no sbatch can still be
running for it, settles it as failed: Slurm never got it."""
from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta
from typing import cast

import sqlalchemy as sa
from flask import current_app

from divergent.app.extensions import db, rowcount
from divergent.app.models import Org, Run, utcnow
from divergent.app.services.accounts.secrets import remove_secrets_file
from divergent.app.services.files.volumes import run_dir
from divergent.app.services.notify.notices import enqueue_for
from divergent.app.services.site.slurm_access import slurm_client
from divergent.slurm.client import SlurmError
from divergent.slurm.jobspec import job_name

# A submit in progress has its job id within a second or two.
ADOPT_AFTER = timedelta(seconds=5)
# Clocks of the server and the controller may differ this much.
CLOCK_SLACK = 60
# The slurm_state of a run Slurm never got.
NOT_SUBMITTED = "NOT_SUBMITTED"

log = logging.getLogger("divergent.reconciler")


def expected_job_name(run: Run) -> str:
    """The name of a run's job: its own, or its sweep's array's."""
    return job_name(run.sweep.name if run.sweep_id else run.name)


def _member_job(run: Run, job_id: str) -> str:
    """A sweep member's job is its task of the array: "87_3"."""
    return f"{job_id}_{run.sweep_index}" if run.sweep_id else job_id


def _org(org_id: int) -> Org:
    # A run's org_id is a foreign key, and orgs are never deleted (offboarding keeps them).
    return cast(Org, db.session.get(Org, org_id))


def _jobs_of(org: Org, runs: list[Run]) -> tuple[dict[str, str], bool]:
    """Job ids by job name for runs of one org, from Slurm, and whether the
    answer is complete: jobs submitted since the oldest was recorded (less
    CLOCK_SLACK), so an older job of the same name (a reinstalled server's)
    is never taken."""
    oldest = min(run.created_at for run in runs)
    return slurm_client().jobs_named(sorted({expected_job_name(run) for run in runs}),
                                     org.slurm_account,
                                     int(oldest.timestamp()) - CLOCK_SLACK)


def adopt_job(run: Run) -> bool:
    """Gives a run without a job id the job Slurm has for it, if any."""
    found, _ = _jobs_of(_org(run.org_id), [run])
    if expected_job_name(run) in found:
        _adopt(run, found[expected_job_name(run)])
    return run.slurm_job_id is not None


def _adopt(run: Run, job_id: str) -> None:
    job_id = _member_job(run, job_id)
    if record_job(run, job_id):
        log.info("%s: adopted job %s, which its submit had not recorded", run.name, job_id)


def _while_without_job(run: Run, **values) -> bool:
    """Changes a run, committed, only while it is queued without a job id:
    its submit, a stop and the reconciler may race for it. Whether it did."""
    changed = rowcount(db.session.execute(sa.update(Run).where(
        Run.id == run.id, Run.status == "queued", Run.slurm_job_id.is_(None)).values(
        **values)))
    db.session.commit()
    return bool(changed)


def record_job(run: Run, job_id: str) -> bool:
    """Gives the run its job id; False, with the job canceled, when the run
    ended meanwhile (stopped, or given up on) and never runs it."""
    if _while_without_job(run, slurm_job_id=job_id) or run.slurm_job_id == job_id:
        return True
    log.info("%s: canceling job %s, which came after the run ended", run.name, job_id)
    try:
        slurm_client(run.unix_user).cancel(job_id)
    except SlurmError as exc:
        log.warning("could not cancel job %s: %s", job_id, exc)
    return False


def settle_without_job(run: Run, status: str) -> bool:
    """Ends a run that has no job, committed: canceled before Slurm took it,
    or failed because Slurm never got it; nothing ran, so nothing is billed.
    Only while it still has no job id: False (the run reread) when its
    submit recorded one meanwhile."""
    ended = _while_without_job(
        run, status=status, slurm_state=NOT_SUBMITTED if status == "failed" else None,
        ended_at=utcnow(), elapsed_seconds=0, cost_micros=0, pending_reason=None)
    if ended:       # its secrets, its registry login: whichever it was given
        remove_secrets_file(run_dir(_org(run.org_id), run.name))
    return bool(ended)


# Longer than a just-submitted array takes to show in squeue.
DROPPED_AFTER = timedelta(seconds=30)


def dropped_while_waiting(run: Run) -> bool:
    """Whether a sweep's member that neither squeue nor sacct knows was
    dropped by Slurm: canceled before it started, its record is gone (a
    waiting array task is no job of its own until it starts)."""
    return (run.sweep_id is not None and run.started_at is None
            and run.created_at <= utcnow() - DROPPED_AFTER)


def end_dropped_member(run: Run, status: str) -> None:
    """Ends, in the caller's transaction with its notifications, a sweep's
    member Slurm dropped before it ever started (canceled while it waited:
    Slurm keeps no record of it); not billed."""
    run.status, run.ended_at, run.elapsed_seconds = status, utcnow(), 0
    run.cost_micros, run.pending_reason = 0, None
    remove_secrets_file(run_dir(_org(run.org_id), run.name))
    enqueue_for(run)


def settle_unsubmitted() -> int:
    """The reconciler's part: every queued run without a job id past
    ADOPT_AFTER gets its job, or past DIV_SUBMIT_GRACE seconds is failed.
    Returns how many changed."""
    now = utcnow()
    grace = timedelta(seconds=current_app.config["DIV_SUBMIT_GRACE"])
    waiting: list[Run] = list(db.session.execute(db.select(Run).where(
        Run.status == "queued", Run.slurm_job_id.is_(None),
        Run.created_at <= now - ADOPT_AFTER)).scalars())
    by_org: dict[int, list[Run]] = defaultdict(list)
    for run in waiting:
        by_org[run.org_id].append(run)
    changed = 0
    for org_id, runs in by_org.items():
        org = _org(org_id)
        try:
            found, complete = _jobs_of(org, runs)
        except SlurmError as exc:   # one org's trouble holds up no other
            log.warning("could not look for the jobs of %s's runs: %s", org.name, exc)
            continue
        for run in runs:
            if expected_job_name(run) in found:
                _adopt(run, found[expected_job_name(run)])
            elif complete and run.created_at <= now - grace:
                log.warning("%s: Slurm never got it (the server stopped while submitting?); "
                            "it is failed", run.name)
                if not settle_without_job(run, "failed"):
                    continue
                enqueue_for(run)
                db.session.commit()
            else:
                continue
            changed += 1
    return changed
