"""The header and last lines of docs/users/div-run.md's Output section, and why a
queued run waits, in words."""
from __future__ import annotations

import pytest

from divergent.app.models import Run
from divergent.app.services.runs.text import format_duration, hardware, header_line, summary_line
from divergent.slurm.reasons import explain_pending

# The hardware's words follow the site's catalog, read in the app's context.
pytestmark = pytest.mark.usefixtures("app_context")


def run(**fields) -> Run:
    values = dict(name="run-k4t9", gpu_type="h100", gpus=1, cpus=1, memory_gib=8,
                  rate_micros_per_hour=4_800_000, max_spend_micros=None, time_limit_minutes=None,
                  status="succeeded", elapsed_seconds=760, cost_micros=1_040_000, exit_code=0)
    values.update(fields)
    return Run(**values)


def test_the_docs_header_line():
    assert header_line(run(max_spend_micros=5_000_000, time_limit_minutes=62)) == (
        "run-k4t9 H100 $4.80/h max spend $5.00 (about 1h 2m)")


@pytest.mark.parametrize("fields,expected", [
    (dict(gpus=8, cpus=8, memory_gib=64), "8 x H100"),
    (dict(gpus=16, cpus=16, memory_gib=128), "16 x H100"),
    (dict(cpus=8, memory_gib=64), "H100, 8 cores, 64 GiB"),
    (dict(memory_gib=4), "H100"),
    (dict(gpu_type="cpu", cpus=1, memory_gib=2), "CPU, 1 core, 2 GiB"),
    (dict(gpu_type="cpu", cpus=4, memory_gib=16), "CPU, 4 cores, 16 GiB"),
])
def test_hardware_forms(fields, expected):
    assert hardware(run(**fields)) == expected


def test_no_spend_limit_says_so():
    assert header_line(run()) == "run-k4t9 H100 $4.80/h no spend limit"


@pytest.mark.parametrize("fields,expected", [
    (dict(), "run-k4t9 finished in 12m 40s and spent $1.04"),
    (dict(status="budget_exceeded", max_spend_micros=5_000_000, elapsed_seconds=3720),
     "run-k4t9 reached its spend limit of $5.00 after 1h 2m 0s"),
    (dict(status="limit_reached"),
     "run-k4t9 reached the org's usage limit after 12m 40s and spent $1.04"),
    (dict(status="failed", exit_code=3),
     "run-k4t9 failed after 12m 40s with exit code 3 and spent $1.04"),
    (dict(status="failed", exit_code=0, slurm_state="OUT_OF_MEMORY"),
     "run-k4t9 ran out of memory (8 GiB) after 12m 40s and spent $1.04"),
    (dict(status="failed", exit_code=None, slurm_state="NODE_FAIL", elapsed_seconds=53,
          cost_micros=80_000),
     "run-k4t9 failed after 53s: a node it ran on failed, and spent $0.08"),
    (dict(status="failed", exit_code=None, slurm_state="NOT_SUBMITTED", elapsed_seconds=0,
          cost_micros=0),
     "run-k4t9 failed before it started: Slurm never got it, and spent $0.00"),
    (dict(status="canceled"), "run-k4t9 was canceled after 12m 40s and spent $1.04"),
    (dict(status="running"), None),
])
def test_the_last_line_for_each_status(fields, expected):
    assert summary_line(run(**fields)) == expected


def test_durations():
    assert [format_duration(s) for s in (0, 5, 60, 760, 3723)] == [
        "0s", "5s", "1m 0s", "12m 40s", "1h 2m 3s"]


@pytest.mark.parametrize("reason,expected", [
    ("Resources", "waiting for 8 x H100"),
    ("Priority", "behind other jobs"),
    ("QOSMaxGRESPerUser", "over a QoS limit (QOSMaxGRESPerUser)"),
    ("AssocGrpGRES", "over the account's limit (AssocGrpGRES)"),
    ("ReqNodeNotAvail, UnavailableNodes:node1", "the nodes it needs are not available "
                                                "(ReqNodeNotAvail, UnavailableNodes:node1)"),
    ("None", "starting"),
    ("BeginTime", "waiting for its start time"),
    ("Dependency", "waiting for another job"),
    ("JobHeldAdmin", "held (JobHeldAdmin)"),
    ("Licenses", "waiting (Licenses)"),
])
def test_why_a_job_waits(reason, expected):
    assert explain_pending(reason, "8 x H100") == expected


def test_a_broken_site_file_never_keeps_a_runs_words_from_being_shown(app_context, tmp_path):
    (tmp_path / "site.toml").write_text("[slurm\n")
    app_context.config["DIV_SITE_FILE"] = str(tmp_path / "site.toml")
    assert hardware(run(cpus=8, memory_gib=64)) == "H100, 8 cores, 64 GiB"
