"""The reconciler: one process that follows Slurm and settles runs. Each
cycle asks Slurm about every live run at once (one squeue and one sacct
call), moves states, accrues cost and, at the end, writes the exit code and
the final cost. Beside it, on threads of their own, the runs of schedules
that are due start and each org's storage is measured. It keeps
no state of its own: everything is rebuilt from the database and Slurm, so
it can be restarted at any time. A lease in the database makes sure that of
several reconcilers only one acts."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy.engine import Row

from divergent.app.extensions import db
from divergent.app.models import LIVE, Org, Run, utcnow
from divergent.app.services import leases
from divergent.app.services.accounts.secrets import masked_metrics, remove_secrets_file, rewrite_secrets_file
from divergent.app.services.errors import Unavailable
from divergent.app.services.files.quota import measure_next
from divergent.app.services.files.volumes import ENDING_SECONDS, data_path, run_dir, run_is_ending
from divergent.app.services.money.pricing import cost
from divergent.app.services.money.usage import month_spend
from divergent.app.services.notify.notices import enqueue_for
from divergent.app.services.runs.checks import verdict
from divergent.app.services.runs.listing import run_json
from divergent.app.services.runs.metrics import CYCLE_BUDGET, ORG_CYCLE_BUDGET, MetricsRead, read_metrics
from divergent.app.services.runs.schedules import fire_due
from divergent.app.services.runs.submissions import (
    dropped_while_waiting,
    end_dropped_member,
    settle_unsubmitted,
)
from divergent.app.services.runs.usage_follow import (
    follow_running,
    live_runs_query,
    settle_ended,
    write_readings,
)
from divergent.app.services.site.gauges import record_cycle
from divergent.app.services.site.settings import load_site
from divergent.app.services.site.slurm_access import slurm_client
from divergent.slurm.client import SlurmError
from divergent.slurm.records import JobRecord, run_status
from divergent.slurm.script import COMMAND_STARTED_FILE, IMAGE_FAILED_FILE

LEASE = leases.RECONCILER
LEASE_SECONDS = 10.0
log = logging.getLogger("divergent.reconciler")


def _job_id(run: Run) -> str:
    # The reconciler follows runs that have a job (follow_jobs' query, or running ones).
    return cast(str, run.slurm_job_id)


def _moment(epoch: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, UTC) if epoch else None


def settle(run: Run, record: JobRecord, state_dir: str | None = None,
           metrics_budget: int = CYCLE_BUDGET) -> None:
    """Moves a run to what Slurm says of its job; reads its new metrics from
    `state_dir` and, once it has ended, gives its checks their verdicts."""
    status = run_status(record, run.stopped_for)
    if status == "budget_exceeded" and run.time_limit_by == "org":
        status = "limit_reached"   # the --time the org's limit left ran out
    elif status == "budget_exceeded" and run.time_limit_by == "maxtime":
        status = "failed"          # the partition's MaxTime, not money, ended it
    if status not in LIVE and not record.finished:
        # squeue already says COMPLETED but sacct has no end or exit code
        # yet (or does not answer): the run has ended only once its final
        # record is there, and stays as it was until then.
        status = run.status
    run.pending_reason = record.reason if status == "queued" else None
    if status != "queued":
        # A waiting job's start is Slurm's estimate, not a start.
        run.started_at = run.started_at or _moment(record.start)
        run.nodes = record.nodes[:255] or run.nodes
    if record.elapsed_seconds is not None:
        run.elapsed_seconds = record.elapsed_seconds
    run.restarts = max(run.restarts or 0, record.restarts)
    if run.started_at is not None:
        run.cost_micros = cost(run.rate_micros_per_hour, run.elapsed_seconds or 0,
                               run.time_limit_minutes)
        if state_dir is not None and _only_pulled(state_dir):
            run.cost_micros = 0     # it was only the attempt to pull its image: ours
    if state_dir is not None and run.started_at is not None:
        if not _read_metrics(run, state_dir, record.finished, metrics_budget) \
                and record.finished:
            # Its metrics are read a bounded amount a cycle: a run that
            # wrote a flood ends once they are all read, later than others.
            run.status = "running"
            return
    if record.finished:
        if state_dir is not None:
            remove_secrets_file(state_dir)     # its values, its registry login
        run.slurm_state = record.state
        # A node failure, a preemption or a cancel ends a job 0:0 (scancel's
        # signal is no code of the run's): only a success's 0 is the run's own.
        run.exit_code = record.exit_code if record.exit_code or status == "succeeded" else None
        run.ended_at = _moment(record.end) or utcnow()   # squeue's cancel has no end
    run.status = status
    if record.finished and run.checks:
        document = run_json(run)
        run.checks = [verdict(document, c["check"]) for c in run.checks]


def _only_pulled(state_dir: str) -> bool:
    """Whether a node could not pull the run's image and none started its
    command (a node that did ran it: that is billed)."""
    return os.path.exists(os.path.join(state_dir, IMAGE_FAILED_FILE)) and \
        not os.path.exists(os.path.join(state_dir, COMMAND_STARTED_FILE))


def _read_metrics(run: Run, state_dir: str, final: bool, budget: int) -> bool:
    """Reads what is new of the run's metrics; whether all of it is read."""
    path = os.path.join(state_dir, "metrics.jsonl")
    try:
        if os.stat(path).st_size <= (run.metrics_offset or 0):
            return True   # nothing new: most runs, most cycles
    except FileNotFoundError:
        return True
    seen = MetricsRead(dict(run.metrics or {}), run.metrics_points or 0,
                       run.metrics_malformed or 0, run.metrics_offset or 0)
    read_metrics(path, seen, final=final, budget=budget)
    if seen.offset != (run.metrics_offset or 0):
        # A new dict, so the JSON column sees the change; a secret's value
        # is *** here as in the log.
        run.metrics = masked_metrics(run, seen.last)
        run.metrics_points, run.metrics_malformed = seen.points, seen.malformed
        run.metrics_offset = seen.offset
    return seen.caught_up


# What a run stopped because its attempts used up its time limit ends as.
SPENT = {"spend": "budget_exceeded", "org": "limit_reached", "maxtime": "failed"}


def restarted(run: Run, record: JobRecord, state_dir: str) -> bool:
    """A requeued run's next attempt gets its secrets again and what its time
    limit has left; whether it is all done (tried again next cycle if not)."""
    if run.secrets_sealed:
        rewrite_secrets_file(state_dir, run)
    return run.time_limit_minutes is None or shorten_after_restart(run, record)


def shorten_after_restart(run: Run, record: JobRecord) -> bool:
    """A requeued run's next attempt gets what its time limit has left after
    the earlier ones (billed per started minute), so its spend limit holds
    over every attempt; none left stops it. Whether Slurm took the change."""
    # restarted() asks only for a run with a time limit.
    left = cast(int, run.time_limit_minutes) - -(-record.earlier_seconds // 60)
    try:
        if left >= 1:
            slurm_client(run.unix_user).shorten(_job_id(run), left)
            log.info("%s restarted (attempt %d): %d minutes left", run.name,
                     record.restarts + 1, left)
        else:
            slurm_client(run.unix_user).cancel(_job_id(run))
            run.stopped_for = SPENT.get(run.time_limit_by or "spend", "budget_exceeded")
    except SlurmError as exc:
        log.warning("could not shorten %s after its restart: %s", run.name, exc)
        return False
    return True


def stop_orgs_at_their_limit(live: list[Run], orgs: dict[int, Org]) -> None:
    """Ends the live runs of each org whose month's spend (live runs'
    accrued cost included) has reached its limit; they end limit_reached.
    A run is billed per started minute, so a running one keeps the minute
    it has paid for: Slurm ends it at that minute's end (its time limit
    shortened to it); a queued one, which has paid nothing, is cancelled.
    Only orgs with a limit cost a query."""
    for org_id in {run.org_id for run in live if run.status in LIVE}:
        org = orgs[org_id]
        if org.monthly_limit_micros is None or month_spend(org) < org.monthly_limit_micros:
            continue
        for run in live:
            if run.org_id == org_id and run.status in LIVE and run.stopped_for is None:
                log.info("stopping %s: org %s reached its usage limit", run.name, org.name)
                try:
                    _end_at_paid_minute(run)
                except SlurmError as exc:
                    log.warning("could not stop %s: %s", run.name, exc)
                    continue
                run.stopped_for = "limit_reached"


def _end_at_paid_minute(run: Run) -> None:
    # Queued, it has paid nothing; restarted after a node failure, Slurm's
    # TimeLimit counts this attempt alone: ended now, not minutes late.
    if run.started_at is None or run.restarts:
        slurm_client(run.unix_user).cancel(_job_id(run))
        return
    paid = max(1, -(-(run.elapsed_seconds or 0) // 60))
    if run.time_limit_minutes is None or run.time_limit_minutes > paid:
        slurm_client(run.unix_user).shorten(_job_id(run), paid)
        run.time_limit_minutes = paid
    # Its time running out is then the org's limit (settle: limit_reached),
    # and its cost is capped at the minutes paid.
    run.time_limit_by = "org"


def reconcile_once() -> int:
    """One cycle over every live run of every org; returns how many changed.
    Runs with a job first: nothing about runs without one holds them up."""
    return follow_jobs() + settle_unsubmitted()


def follow_jobs(runs: list[Run] | None = None) -> int:
    """Every live run with a job (or these alone): its state, cost and
    metrics from Slurm."""
    usage = load_site().usage
    live = runs if runs is not None else list(
        db.session.execute(live_runs_query(usage)).scalars())
    if not live:
        return 0
    records = slurm_client().query([_job_id(run) for run in live], squeue_alone=True)
    live_orgs: Iterable[Org] = db.session.execute(
        db.select(Org).where(Org.id.in_({run.org_id for run in live}))).scalars()
    orgs = {org.id: org for org in live_orgs}
    changed = 0
    metrics_left: defaultdict[int, int] = defaultdict(lambda: ORG_CYCLE_BUDGET)
    now = time.time()
    ended: list[tuple[Run, JobRecord, str]] = []
    readings: list[dict] = []
    for run in live:
        record = records.get(_job_id(run))
        if record is None:
            # Just submitted (neither squeue nor sacct has it yet), or a
            # sweep's member that was canceled while it waited.
            if dropped_while_waiting(run):
                end_dropped_member(run, run.stopped_for or "canceled")
                changed += 1
            continue
        before = (run.status, run.pending_reason, run.elapsed_seconds)
        offset, restarts = run.metrics_offset or 0, run.restarts or 0
        state_dir = run_dir(orgs[run.org_id], run.name)
        try:
            settle(run, record, state_dir, min(CYCLE_BUDGET, metrics_left[run.org_id]))
            metrics_left[run.org_id] -= (run.metrics_offset or 0) - offset
            if run.restarts > restarts and run.status in LIVE and \
                    not restarted(run, record, state_dir):
                run.restarts = restarts
        except Exception:   # what one run wrote never stops the cycle every org shares
            log.exception("could not settle %s; it is tried again next cycle", run.name)
            db.session.expire(run)
            continue
        try:   # apart: what it used never holds up its state, cost and end
            follow_running(run, state_dir, usage, now, readings)
        except Exception:
            log.exception("could not read what %s uses; it is read again later", run.name)
        changed += before != (run.status, run.pending_reason, run.elapsed_seconds)
        if before[0] in LIVE and run.status not in LIVE:
            enqueue_for(run)    # in the transaction that ends it
            ended.append((run, record, state_dir))
    settle_ended(ended)
    db.session.flush()
    write_readings(readings)
    stop_orgs_at_their_limit(live, orgs)
    db.session.commit()
    return changed


def follow_ending(until: float, stop: threading.Event) -> None:
    """Between cycles, the runs whose command has ended: those ending when
    the cycle began, and those a log follower saw end since
    (Run.end_heard_at), looked for every HEARD_SECONDS. squeue alone says
    which of them Slurm has ended (milliseconds; sacct is a round trip to
    the database), asked as often for EAGER_SECONDS and then less and less
    often while Slurm has not; those alone are settled, with one squeue and one sacct for
    them all. `div run` and the dashboard show a run's end a moment after
    Slurm has it, not a cycle later."""
    ending = {run.id: run for run in runs_ending()}
    pause, ask_at = HEARD_SECONDS, time.monotonic()
    eager_until = ask_at      # eager only for what was heard these last EAGER_SECONDS
    while time.monotonic() + HEARD_SECONDS < until:
        heard = [run for run in runs_heard_ending() if run.id not in ending]
        if heard:
            ending.update((run.id, run) for run in heard)
            pause, ask_at = HEARD_SECONDS, time.monotonic()
            newest = max(cast(datetime, run.end_heard_at) for run in heard)
            eager_until = max(eager_until, ask_at + EAGER_SECONDS
                              - (utcnow() - newest).total_seconds())
        now = time.monotonic()
        if ending and now >= ask_at:
            ended = slurm_client().ended([_job_id(run) for run in ending.values()])
            if ended:
                follow_jobs([run for run in ending.values() if _job_id(run) in ended])
                ending = {key: run for key, run in ending.items() if run.status in LIVE}
            pause = HEARD_SECONDS if now < eager_until else min(MAX_ENDING_PAUSE, pause * 2)
            ask_at = time.monotonic() + pause
        if stop.wait(HEARD_SECONDS):
            return


# How often the reconciler looks for runs a follower saw end, between
# cycles; how long it asks squeue about them that often (most jobs end
# within a few tenths of a second of their command), and how long at most
# it waits between asking after that.
HEARD_SECONDS = 0.05
EAGER_SECONDS = 1.0
MAX_ENDING_PAUSE = 0.8


def runs_ending() -> list[Run]:
    """Running runs whose command has ended on their first node (one stat
    a running run, as its metrics cost each cycle)."""
    running: Sequence[Row[Run, str]] = db.session.execute(db.select(Run, Org.name).join(
        Org, Org.id == Run.org_id).where(Run.status == "running")).all()
    return [run for run, org in running
            if run_is_ending(data_path("runs", org, run.name), run.restarts or 0)]


def runs_heard_ending() -> list[Run]:
    """Live runs a follower saw end these last ENDING_SECONDS (one indexed
    query: most cycles find none)."""
    since = utcnow() - timedelta(seconds=ENDING_SECONDS)
    return list(db.session.execute(db.select(Run).where(
        Run.status.in_(LIVE), Run.slurm_job_id.is_not(None),
        Run.end_heard_at > since)).scalars())


def holder_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def reconcile_alone() -> int | None:
    """One cycle (`flask reconcile --once`), only if no other reconciler is
    acting: the runs it changed, or None when another one holds the lease."""
    holder = holder_name()
    if not leases.acquire(LEASE, holder, 30):
        return None
    try:
        return reconcile_once()
    finally:
        leases.release(LEASE, holder)


def _cycle(holder: str, ttl: float, acting: bool) -> bool:
    """One cycle if this reconciler holds the lease; whether it does."""
    if not leases.acquire(LEASE, holder, ttl):
        if acting:
            log.warning("reconciler %s lost its lease", holder)
        return False
    if not acting:
        log.info("reconciler %s is acting", holder)
    started = time.monotonic()
    reconcile_once()
    try:
        record_cycle(time.monotonic() - started)
    except Exception:   # a metric not written is not a cycle that failed: no backoff
        db.session.rollback()
        log.warning("could not record the cycle for /metrics", exc_info=True)
    return True


def fire_schedules() -> None:
    """Starts the due schedules' runs, on a thread of its own (one org's
    many schedules never slow the cycle that settles and bills everyone's
    runs), and only while this reconciler holds the lease."""
    if leases.acquire(LEASE, holder_name(), LEASE_SECONDS):
        fire_due()


def measure_storage(most: int = 10) -> None:
    """Measures the orgs whose storage was measured longest ago, up to `most`."""
    for _ in range(most):
        if measure_next() is None:
            return


def run_forever(interval: float, stop_after: float | None = None,
                stop: threading.Event | None = None) -> None:
    """Cycles every `interval` seconds while it holds the lease; waits as a
    standby while another reconciler does. Setting `stop` ends it between
    steps, never inside a transaction, so its lease is always handed back."""
    stop = stop or threading.Event()
    holder = holder_name()
    ttl = max(LEASE_SECONDS, interval * 10)
    deadline = None if stop_after is None else time.monotonic() + stop_after
    acting, pause = False, interval
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            started = time.monotonic()
            try:
                acting = _cycle(holder, ttl, acting)
                pause = interval
                if acting:
                    follow_ending(started + interval, stop)
            except (SlurmError, Unavailable) as exc:
                db.session.rollback()
                log.warning("Slurm did not answer: %s", exc)
            except Exception:   # the database gone, say: the reconciler goes on for every org
                db.session.rollback()
                pause = min(30.0, pause * 2)
                log.exception("a reconciler cycle failed; trying again in %.0f s", pause)
            stop.wait(max(0.0, pause - (time.monotonic() - started)))
    finally:
        _hand_back(holder)


def _hand_back(holder: str) -> None:
    """Releases the lease if this holder has it (also when a cycle was cut
    short before it knew it held it), so a restarted reconciler acts at once
    instead of after the TTL; if the database is gone the TTL frees it."""
    try:
        db.session.rollback()
        leases.release(LEASE, holder)
    except Exception:
        log.exception("could not hand the lease back; it expires on its own")
