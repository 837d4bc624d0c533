"""Stopping a run: Slurm cancels its job and the reconciler settles it; a
run that has no job yet is settled here, and the copies a stopped run was
waiting for stop with it."""
from __future__ import annotations

import contextlib
from typing import cast

from divergent.app.extensions import db
from divergent.app.models import LIVE, Run
from divergent.app.services.errors import (
    ServiceError,
    Unavailable,
)
from divergent.app.services.runs.submissions import adopt_job, end_dropped_member, settle_without_job
from divergent.app.services.site.slurm_access import slurm_client
from divergent.slurm.client import SlurmError


def stop_run(run: Run) -> bool:
    """Asks Slurm to cancel; the reconciler settles the status. False when the
    run had already ended."""
    if run.status not in LIVE:
        return False
    try:
        # Without a job id yet: canceled now, and a submit still going then
        # cancels the job it makes; unless it recorded one meanwhile.
        if run.slurm_job_id is None and not adopt_job(run):
            if settle_without_job(run, "canceled"):
                return True
            if run.slurm_job_id is None:   # reread: the reconciler ended it meanwhile
                return False
        # It has one now: it had, adopt_job found it, or the reread has it.
        job_id = cast(str, run.slurm_job_id)
        slurm_client(run.unix_user).cancel(job_id)
        if run.sweep_id and run.started_at is None and \
                job_id not in slurm_client().query([job_id]):
            end_dropped_member(run, "canceled")    # Slurm dropped the waiting member
    except SlurmError as exc:
        raise Unavailable(f"Slurm did not cancel the run: {exc}") from None
    db.session.commit()
    if run.started_at is None:
        for copy in _live_copies(run):    # no run waits for them now
            with contextlib.suppress(ServiceError):
                stop_run(copy)
    return True


def _live_copies(run: Run) -> list[Run]:
    names = [mount["copy"] for mount in run.mounts or []]
    if not names:
        return []
    return list(db.session.execute(db.select(Run).where(
        Run.org_id == run.org_id, Run.name.in_(names), Run.status.in_(LIVE))).scalars())
