"""Parsing squeue and sacct, and the decisions on their answers."""
from __future__ import annotations

from slurm.records import JobRecord, merge, parse_sacct, parse_squeue, run_status

SACCT = (
    "41|COMPLETED|0:0|1796059887|1796059899|12|node[1-2]|None\n"
    "42|FAILED|3:0|1796059887|1796059888|1|node1|None\n"
    "43|CANCELLED by 0|0:15|1796059887|1796059890|3|node2|None\n"
    "44|PENDING|0:0|Unknown|Unknown|0|None assigned|Resources\n"
    "45|OUT_OF_MEMORY|0:125|1796059900|1796059902|2|node1|None\n"
)


def test_sacct_rows_become_typed_records():
    records = parse_sacct(SACCT)
    assert records["41"] == JobRecord("41", "COMPLETED", "", 0, 0, 1796059887, 1796059899, 12, "node[1-2]")
    assert (records["42"].state, records["42"].exit_code) == ("FAILED", 3)
    assert records["43"].state == "CANCELLED"
    assert records["44"] == JobRecord("44", "PENDING", "Resources", 0, 0, None, None, 0, "")
    assert not records["44"].finished and records["41"].finished


def test_squeue_rows_carry_the_reason_a_job_waits():
    records = parse_squeue("50|PENDING|QOSMaxGRESPerUser|N/A|\n51|RUNNING|None|1796059887|node1\n")
    assert records["50"].reason == "QOSMaxGRESPerUser"
    assert (records["51"].state, records["51"].start, records["51"].reason) == ("RUNNING", 1796059887, "")


def test_squeue_wins_while_sacct_lags_and_sacct_wins_at_the_end():
    live = parse_squeue("60|RUNNING|None|1000|node1\n61|COMPLETED|None|1000|node[1-2]\n")
    accounted = parse_sacct("60|PENDING|0:0|Unknown|Unknown|0|None assigned|None\n"
                            "61|COMPLETED|0:0|1000|1010|10|node1|None\n")
    merged = merge(live, accounted, now=1030)
    assert (merged["60"].state, merged["60"].elapsed_seconds) == ("RUNNING", 30)
    assert (merged["61"].end, merged["61"].nodes) == (1010, "node[1-2]")


def test_states_map_as_the_design_says():
    records = parse_sacct(SACCT)
    assert [run_status(records[j]) for j in ("41", "42", "43", "44", "45")] == [
        "succeeded", "failed", "canceled", "queued", "failed"]
    assert run_status(JobRecord("1", "TIMEOUT")) == "budget_exceeded"
    assert run_status(records["43"], stopped_for="budget_exceeded") == "budget_exceeded"
