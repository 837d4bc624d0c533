"""The reconciler: one process that follows Slurm and settles runs. Each
cycle asks Slurm about every live run at once (one squeue and one sacct
call), moves states, accrues cost and, at the end, writes the exit code and
the final cost. It keeps no state of its own: everything is rebuilt from the
database and Slurm, so it can be restarted at any time. A lease in the
database makes sure that of several reconcilers only one acts."""
from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime, timezone

from app.extensions import db
from app.models import Run
from app.services import leases
from app.services.pricing import cost
from app.services.runs import LIVE
from app.services.slurm_access import slurm_client
from slurm.client import SlurmError
from slurm.records import JobRecord, run_status

LEASE = "reconciler"
log = logging.getLogger("divergent.reconciler")


def _moment(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, timezone.utc) if epoch else None


def settle(run: Run, record: JobRecord) -> None:
    """Moves a run to what Slurm says of its job."""
    status = run_status(record, run.stopped_for)
    if status not in LIVE and not record.finished:
        # squeue already says COMPLETED but sacct has no end or exit code
        # yet: the run has ended only once its final record is there.
        status = "running"
    run.pending_reason = record.reason if status == "queued" else None
    run.started_at = run.started_at or _moment(record.start)
    if record.elapsed_seconds is not None:
        run.elapsed_seconds = record.elapsed_seconds
    if run.started_at is not None:
        run.cost_micros = cost(run.rate_micros_per_hour, run.elapsed_seconds or 0)
    if record.finished:
        run.slurm_state = record.state
        run.exit_code = record.exit_code
        run.ended_at = _moment(record.end)
    run.status = status


def reconcile_once() -> int:
    """One cycle over every live run of every org; returns how many changed."""
    live = list(db.session.execute(
        db.select(Run).where(Run.status.in_(LIVE), Run.slurm_job_id.is_not(None))).scalars())
    if not live:
        return 0
    records = slurm_client().query([run.slurm_job_id for run in live])
    changed = 0
    for run in live:
        record = records.get(run.slurm_job_id)
        if record is None:
            continue   # just submitted: neither squeue nor sacct has it yet
        before = (run.status, run.pending_reason, run.elapsed_seconds)
        settle(run, record)
        changed += before != (run.status, run.pending_reason, run.elapsed_seconds)
    db.session.commit()
    return changed


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_forever(interval: float, stop_after: float | None = None) -> None:
    """Cycles every `interval` seconds while it holds the lease; waits as a
    standby while another reconciler does."""
    holder = holder_name()
    ttl = max(10.0, interval * 10)
    deadline = None if stop_after is None else time.monotonic() + stop_after
    acting = False
    try:
        while deadline is None or time.monotonic() < deadline:
            started = time.monotonic()
            if leases.acquire(LEASE, holder, ttl):
                if not acting:
                    log.info("reconciler %s is acting", holder)
                    acting = True
                try:
                    reconcile_once()
                except SlurmError as exc:
                    db.session.rollback()
                    log.warning("Slurm did not answer: %s", exc)
            elif acting:
                log.warning("reconciler %s lost its lease", holder)
                acting = False
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        if acting:
            leases.release(LEASE, holder)
