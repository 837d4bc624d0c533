"""The reconciler's decisions and its lease: one acting reconciler, states
moved from Slurm's records, a run ended only once sacct has its final record."""
from __future__ import annotations

from app.models import Run
from app.reconciler import settle
from app.services import leases
from slurm.records import JobRecord


def test_one_holder_at_a_time_until_the_lease_expires(app_context):
    assert leases.acquire("reconciler", "a", 30)
    assert not leases.acquire("reconciler", "b", 30)
    assert leases.acquire("reconciler", "a", 30)        # renewal
    leases.release("reconciler", "a")
    assert leases.acquire("reconciler", "b", 0.001)
    import time
    time.sleep(0.01)
    assert leases.acquire("reconciler", "a", 30)        # b's expired


def run() -> Run:
    return Run(name="run-x", status="queued", rate_micros_per_hour=4_800_000, cost_micros=0)


def test_queued_running_and_ended():
    r = run()
    # squeue's start for a waiting job is its estimate, not a start.
    settle(r, JobRecord("1", "PENDING", reason="Resources", start=999_999_999))
    assert (r.status, r.pending_reason, r.started_at, r.cost_micros) == (
        "queued", "Resources", None, 0)
    settle(r, JobRecord("1", "RUNNING", start=1_000, elapsed_seconds=61))
    assert (r.status, r.pending_reason, r.cost_micros) == ("running", None, 160_000)
    settle(r, JobRecord("1", "COMPLETED", start=1_000))     # squeue's word, no end yet
    assert r.status == "running"
    settle(r, JobRecord("1", "FAILED", exit_code=3, start=1_000, end=1_130, elapsed_seconds=130))
    assert (r.status, r.exit_code, r.cost_micros, r.slurm_state) == ("failed", 3, 240_000, "FAILED")
    assert r.ended_at.timestamp() == 1_130
    assert r.started_at.timestamp() == 1_000


def test_a_job_that_ended_without_its_final_record_leaves_the_run_as_it_was():
    r = run()
    settle(r, JobRecord("1", "PENDING", reason="Priority"))
    settle(r, JobRecord("1", "CANCELLED", start=1_000))   # squeue's word, sacct down
    assert (r.status, r.started_at, r.cost_micros) == ("queued", None, 0)


def test_a_node_failure_is_failed_with_no_exit_code_of_its_own():
    r = run()
    settle(r, JobRecord("1", "NODE_FAIL", exit_code=0, start=1_000, end=1_053,
                        elapsed_seconds=53))
    assert (r.status, r.exit_code, r.slurm_state) == ("failed", None, "NODE_FAIL")


def test_a_job_we_cancelled_for_spend_is_budget_exceeded():
    r = run()
    r.stopped_for = "budget_exceeded"
    settle(r, JobRecord("1", "CANCELLED", start=1, end=61, elapsed_seconds=60, exit_code=0))
    assert r.status == "budget_exceeded"
