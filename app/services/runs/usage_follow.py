"""The reconciler's part of what runs use: a running run's samples read
every few samples (staggered by run, so that 5,000 runs are not all read in
one cycle) with the idle policy's step, and an ended run's figures from
Slurm's accounting, as the cycle's sacct gave them."""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import defer

from divergent.app.extensions import db
from divergent.app.models import LIVE, Run
from divergent.app.services.runs.idle import apply_idle_policy
from divergent.app.services.runs.usage import last_samples, summarize
from divergent.app.services.site.usage import UsageSettings
from divergent.slurm.records import JobRecord

log = logging.getLogger("divergent.usage")
GOLDEN = (math.sqrt(5) - 1) / 2


def reading_due(run: Run, settings: UsageSettings, now: float) -> bool:
    """Whether a period (refresh_seconds) has turned since the run was last
    read; each run's periods start at a phase of its own."""
    period = settings.refresh_seconds
    phase = (run.id * GOLDEN) % 1 * period
    last = run.usage_read_at
    if last is None:
        # Never read: as if read as it started, so that turning usage on
        # (or a restart of many runs) spreads the first readings too.
        last = run.started_at.timestamp() if run.started_at else now - period
    return (now + phase) // period != (last + phase) // period


def follow_running(run: Run, state_dir: str, settings: UsageSettings, now: float,
                   readings: list[dict]) -> None:
    """Reads a running run's samples when due: its new figures go to
    `readings` (write_readings), the idle policy takes its step."""
    if settings.interval_seconds == 0 or run.status != "running" \
            or not reading_due(run, settings, now):
        return
    samples = last_samples(state_dir)
    reading = {"id": run.id, "usage": summarize(run, samples), "usage_read_at": now}
    idle = apply_idle_policy(run, samples, settings, now)
    readings.append(reading if idle is None else {**reading, "idle": idle})


def write_readings(readings: list[dict]) -> None:
    """A cycle's readings in one statement: set on each run's row instead,
    they would split the cycle's one batched UPDATE of every run into a
    statement each (a tenth of a cycle at 5,000 runs)."""
    if readings:
        db.session.execute(sa.update(Run), readings)


def live_runs_query(settings: UsageSettings) -> sa.Select:
    """The reconciler's query of live runs with a job: without their usage,
    which a cycle writes and never reads, nor their idle state unless the
    idle policy needs it (5,000 runs' JSON decoded is a tenth of a cycle)."""
    lazy = [defer(Run.usage)] + ([] if settings.idle_policy else [defer(Run.idle)])
    return sa.select(Run).where(Run.status.in_(LIVE), Run.slurm_job_id.is_not(None)) \
        .options(*lazy)


def settle_ended(ended: Iterable[tuple[Run, JobRecord, str]]) -> None:
    """The final figures of runs that ended this cycle: Slurm's, from the
    cycle's own sacct (its TotalCPU and TRESUsageInMax fields, no second
    call to hold up a run's end), and the samplers' where Slurm has none."""
    for run, record, state_dir in ended:
        if run.started_at is None:
            continue
        seconds = (record.elapsed_seconds or 0) - record.earlier_seconds
        try:
            run.usage = summarize(run, last_samples(state_dir), record.usage, seconds)
        except Exception:   # one run's figures never stop the cycle every org shares
            log.exception("could not settle what %s used", run.name)
