"""The reconciler's decisions and its lease: one acting reconciler, states
moved from Slurm's records, a run ended only once sacct has its final record;
and whole cycles (reconcile_once) over a real database with Slurm's answers
scripted. The same cycles against the dev cluster are in test_div_run.py and
test_faults.py."""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import timedelta

import pytest
from flask import current_app

from divergent.app.extensions import db
from divergent.app.models import Org, Project, Run, utcnow
from divergent.app.reconciler import reconcile_once, settle
from divergent.app.services import leases
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.files.volumes import run_dir
from divergent.app.services.runs.text import summary_line
from divergent.app.services.site import slurm_access
from divergent.app.services.site.settings import load_site, save_site
from divergent.app.services.site.usage import UsageSettings
from divergent.slurm.records import JobRecord, JobUsage


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


def test_a_canceled_run_has_no_exit_code_of_its_own():
    """scancel ends the job 0:15: the 0 is not the run's (it did not succeed)."""
    r = run()
    settle(r, JobRecord("1", "CANCELLED", start=1, end=61, elapsed_seconds=60, exit_code=0))
    assert (r.status, r.exit_code) == ("canceled", None)
    done = run()
    settle(done, JobRecord("1", "COMPLETED", start=1, end=61, elapsed_seconds=60, exit_code=0))
    assert (done.status, done.exit_code) == ("succeeded", 0)


class ScriptedSlurm:
    """Slurm's answers as the test sets them, standing in for the site's
    client (slurm_access.standing_in): records by job id, jobs by name, and
    the jobs canceled."""

    def __init__(self):
        self.records: dict[str, JobRecord] = {}
        self.named: dict[str, str] = {}
        self.canceled: list[str] = []
        self.shortened: dict[str, int] = {}

    def query(self, job_ids, squeue_alone=False):
        return {j: self.records[j] for j in job_ids if j in self.records}

    def jobs_named(self, names, account, submitted_since):
        return {n: self.named[n] for n in names if n in self.named}, True

    def cancel(self, job_id):
        self.canceled.append(job_id)

    def shorten(self, job_id, minutes):
        self.shortened[job_id] = minutes


@pytest.fixture
def slurm(app_context):
    with slurm_access.standing_in(ScriptedSlurm()) as scripted:
        yield scripted


def live_runs(count: int, org_name: str = "acme", **fields) -> list[Run]:
    org = get_or_create_org(org_name)
    user = get_or_create_user(org, f"{org_name}-user")
    project = Project(org_id=org.id, name="p")
    db.session.add(project)
    db.session.flush()
    runs = [Run(org_id=org.id, project_id=project.id, user_id=user.id, name=f"run-{org_name}{i}",
                gpu_type="h100", gpus=1, cpus=1, memory_gib=8, image="img", command="true",
                rate_micros_per_hour=4_800_000, **fields) for i in range(count)]
    db.session.add_all(runs)
    db.session.commit()
    return runs


def test_one_cycle_moves_every_run_with_a_job_to_what_slurm_says(slurm):
    waiting, started, done = live_runs(3, status="queued")
    for n, r in enumerate((waiting, started, done)):
        r.slurm_job_id = str(n + 1)
    db.session.commit()
    slurm.records = {"1": JobRecord("1", "PENDING", reason="Priority"),
                     "2": JobRecord("2", "RUNNING", start=1_000, elapsed_seconds=61),
                     "3": JobRecord("3", "COMPLETED", exit_code=0, start=1_000, end=1_090,
                                    elapsed_seconds=90)}
    assert reconcile_once() == 3
    assert (waiting.status, waiting.pending_reason) == ("queued", "Priority")
    assert (started.status, started.cost_micros) == ("running", 160_000)
    assert (done.status, done.exit_code, done.cost_micros) == ("succeeded", 0, 160_000)
    assert reconcile_once() == 0                     # nothing new: nothing changed
    del slurm.records["1"]                           # not in squeue or sacct (yet)
    assert reconcile_once() == 0 and waiting.status == "queued"


def test_an_org_at_its_limit_has_its_live_runs_ended_at_their_paid_minute_and_no_other(slurm):
    """Billed per started minute, a running run keeps the minute it has paid
    for: Slurm ends it there (its time limit shortened to it); a queued run,
    which has paid nothing, is canceled; another org's goes on."""
    over = live_runs(3, "over", status="running")
    fine = live_runs(1, "fine", status="running")
    get_or_create_org("over").monthly_limit_micros = 100_000       # 10 cents
    for n, r in enumerate(over + fine):
        r.slurm_job_id = str(n + 1)
        slurm.records[r.slurm_job_id] = JobRecord(r.slurm_job_id, "RUNNING", start=1_000,
                                                  elapsed_seconds=570)   # 9m 30s: $0.80 each
    slurm.records["3"] = JobRecord("3", "PENDING", reason="Resources")
    db.session.commit()
    reconcile_once()
    assert slurm.canceled == ["3"] and slurm.shortened == {"1": 10, "2": 10}
    assert [r.stopped_for for r in over + fine] == ["limit_reached"] * 3 + [None]
    assert [(r.time_limit_minutes, r.time_limit_by) for r in over[:2]] == [(10, "org")] * 2


def test_a_run_its_submit_did_not_record_gets_the_job_slurm_has_under_its_name(slurm):
    lost, never = live_runs(2, status="queued")
    for r in (lost, never):
        r.created_at = utcnow() - timedelta(seconds=10)
    db.session.commit()
    slurm.named = {f"div-{lost.name}": "7"}
    slurm.records = {"7": JobRecord("7", "RUNNING", start=1_000, elapsed_seconds=5)}
    assert reconcile_once() == 1
    assert (lost.slurm_job_id, never.slurm_job_id) == ("7", None)
    assert reconcile_once() == 1 and lost.status == "running"
    never.created_at = utcnow() - timedelta(seconds=app_config_grace() + 1)
    db.session.commit()
    assert reconcile_once() == 1
    assert (never.status, never.slurm_state, never.cost_micros) == ("failed", "NOT_SUBMITTED", 0)


def app_config_grace() -> float:
    return current_app.config["DIV_SUBMIT_GRACE"]


def _samples(run: Run, *lines: dict) -> None:
    folder = run_dir(db.session.get(Org, run.org_id), run.name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "usage.0.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps({"start": 1_000.0, "attempt": 0, "memory": 1 << 30,
                                "memory_peak": 2 << 30, **line}) + "\n")


def test_usage_is_read_from_the_samplers_while_running_and_from_sacct_at_the_end(slurm):
    # Started a while ago: read in the first cycle (a run is first read a
    # period after it started).
    running, ended = live_runs(2, status="running", started_at=utcnow() - timedelta(minutes=1))
    running.slurm_job_id, ended.slurm_job_id = "2", "3"
    db.session.commit()
    _samples(running, {"time": 1_100.0, "cpu_s": 25.0})
    _samples(ended, {"time": 1_050.0, "cpu_s": 10.0})
    slurm.records = {"2": JobRecord("2", "RUNNING", start=1_000, elapsed_seconds=100),
                     "3": JobRecord("3", "COMPLETED", exit_code=0, start=1_000, end=1_090,
                                    elapsed_seconds=90,
                                    usage=JobUsage(cpu_seconds=45.0, max_memory_bytes=3 << 30))}
    reconcile_once()
    live = db.session.get(Run, running.id).usage
    assert live["source"] == "sampler" and live["cpu_efficiency"] == 0.25
    assert live["max_memory_bytes"] == 2 << 30 and live["gpu_note"] == "no GPU telemetry on this cluster"
    final = db.session.get(Run, ended.id).usage
    assert final["source"] == "slurm" and final["cpu_efficiency"] == 0.5
    assert final["max_memory_bytes"] == 3 << 30


def test_the_idle_policy_cancels_through_slurm_and_the_run_ends_saying_why(slurm):
    save_site(replace(load_site(), usage=UsageSettings(
        interval_seconds=1, idle_below=0.5, idle_warn_minutes=0.05, idle_stop_minutes=0.05,
        idle_measure="cpu")))
    run, = live_runs(1, status="running", started_at=utcnow() - timedelta(minutes=1),
                     slurm_job_id="5")
    slurm.records = {"5": JobRecord("5", "RUNNING", start=1_000, elapsed_seconds=100)}
    for t in (0, 4, 8):
        _samples(run, {"time": 1_000.0 + t, "cpu_s": 0.0})
        run.usage_read_at = None             # read every cycle, whatever the clock says
        db.session.commit()
        reconcile_once()
        if t == 4:           # warned: stopped 3 s after the warning, by the server's clock
            assert slurm.canceled == []
            time.sleep(3.1)
    assert slurm.canceled == ["5"]
    slurm.records["5"] = JobRecord("5", "CANCELLED", start=1_000, end=1_010, elapsed_seconds=10)
    reconcile_once()
    run = db.session.get(Run, run.id)
    assert run.status == "canceled"
    assert summary_line(run).startswith(f"{run.name} was stopped after 10s: its CPUs stayed "
                                        "under 50% utilization for 0.1 minutes")
