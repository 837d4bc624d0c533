"""Reconciliation of charges: a month's ended runs billed again from sacct's
elapsed seconds and each run's own rate, compared with what was billed."""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa

from divergent.app.extensions import db
from divergent.app.models import LIVE, Org, Run
from divergent.app.services.errors import Unavailable
from divergent.app.services.money.pricing import cost
from divergent.app.services.money.usage import month_bounds
from divergent.app.services.site.slurm_access import slurm_client
from divergent.slurm.client import SlurmError

BATCH = 500


@dataclass(frozen=True)
class Charge:
    org: str
    run: str
    job_id: str
    billed_micros: int
    recomputed_micros: int | None   # None: sacct does not know the job

    @property
    def difference(self) -> int:
        return (self.recomputed_micros or 0) - self.billed_micros


def recompute(month: str | None = None) -> list[Charge]:
    start, end, _ = month_bounds(month)
    rows = db.session.execute(
        sa.select(Run, Org.name).join(Org, Org.id == Run.org_id).where(
            Run.created_at >= start, Run.created_at < end, Run.status.not_in(LIVE),
            Run.slurm_job_id.is_not(None)).order_by(Run.id)).all()
    charges = []
    for first in range(0, len(rows), BATCH):
        batch = rows[first:first + BATCH]
        try:
            # The query took only runs with a job id.
            records = slurm_client().query([cast(str, run.slurm_job_id) for run, _ in batch])
        except SlurmError as exc:
            raise Unavailable(f"Slurm's accounting did not answer: {exc}") from None
        for run, org in batch:
            job_id = cast(str, run.slurm_job_id)
            record = records.get(job_id)
            again = None
            if record is not None and record.elapsed_seconds is not None and run.started_at:
                again = cost(run.rate_micros_per_hour, record.elapsed_seconds,
                             run.time_limit_minutes)
            elif record is not None and run.started_at is None:
                again = 0   # never started: never billed
            charges.append(Charge(org, run.name, job_id, run.cost_micros, again))
    return charges
