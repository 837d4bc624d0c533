"""Parsing squeue, sacct and sinfo, and the decisions on their answers."""
from __future__ import annotations

from divergent.slurm.records import (
    JobRecord,
    merge,
    parse_gres,
    parse_sacct,
    parse_sinfo_nodes,
    parse_squeue,
    run_status,
    slurm_minutes,
)

SACCT = (
    "41|COMPLETED|0:0|1796059887|1796059899|12|node[1-2]|None|div-run|\n"
    "42|FAILED|3:0|1796059887|1796059888|1|node1|None|div-run|\n"
    "43|CANCELLED by 0|0:15|1796059887|1796059890|3|node2|None|div-run|\n"
    "44|PENDING|0:0|Unknown|Unknown|0|None assigned|Resources|div-run|\n"
    "45|OUT_OF_MEMORY|0:125|1796059900|1796059902|2|node1|None|div-run|\n"
)


def test_sacct_rows_become_typed_records():
    records = parse_sacct(SACCT)
    assert records["41"] == JobRecord("41", "COMPLETED", "", 0, 0, 1796059887, 1796059899, 12,
                                      "node[1-2]", "div-run")
    assert (records["42"].state, records["42"].exit_code) == ("FAILED", 3)
    assert records["43"].state == "CANCELLED"
    assert records["44"] == JobRecord("44", "PENDING", "Resources", 0, 0, None, None, 0, "",
                                      "div-run")
    assert not records["44"].finished and records["41"].finished


def test_a_step_out_of_memory_makes_a_failed_job_out_of_memory():
    # As sacct answers for `--memory 1` allocating 3 GiB: the job FAILED 9:0,
    # only its step says why.
    records = parse_sacct(
        "87|FAILED|9:0|1000|1010|10|node1|None|div-run|\n"
        "87.batch|FAILED|9:0|1000|1010|10|node1||div-run|\n"
        "87.0|OUT_OF_MEMORY|0:125|1000|1010|10|node1||div-run|\n"
        "88|COMPLETED|0:0|1000|1010|10|node1|None|div-run|\n"
        "88.0|OUT_OF_MEMORY|0:125|1000|1005|5|node1||div-run|\n")
    assert list(records) == ["87", "88"]
    assert records["87"].state == "OUT_OF_MEMORY" and records["87"].exit_code == 9
    assert records["88"].state == "COMPLETED"   # it got over it: the run succeeded


def test_a_job_canceled_before_it_ran_has_no_start():
    """sacct gives such a job its end as its start, and no node: billing
    reads it as never started (its copy failed, or it was stopped queued)."""
    records = parse_sacct("61|CANCELLED by 0|0:0|1796182227|1796182227|0|None assigned|"
                          "Dependency|div-run|\n")
    assert records["61"].start is None and records["61"].end == 1796182227


def test_squeue_rows_carry_the_reason_a_job_waits():
    records = parse_squeue("50|PENDING|QOSMaxGRESPerUser|N/A||div-run||1\n"
                           "51|RUNNING|None|1796059887|node1|div-run||1\n")
    assert records["50"].reason == "QOSMaxGRESPerUser"
    assert (records["51"].state, records["51"].start, records["51"].reason) == ("RUNNING", 1796059887, "")


def test_squeue_wins_while_sacct_lags_and_sacct_wins_at_the_end():
    live = parse_squeue("60|RUNNING|None|1000|node1|div-run||1\n"
                        "61|COMPLETED|None|1000|node[1-2]|div-run||1\n")
    accounted = parse_sacct("60|PENDING|0:0|Unknown|Unknown|0|None assigned|None|div-run|\n"
                            "61|COMPLETED|0:0|1000|1010|10|node1|None|div-run|\n")
    merged = merge(live, accounted, now=1030)
    assert (merged["60"].state, merged["60"].elapsed_seconds) == ("RUNNING", 30)
    assert (merged["61"].end, merged["61"].nodes) == (1010, "node[1-2]")


def test_a_job_that_ended_at_once_is_final_under_slurmdbd_s_placeholder_name():
    """A job that starts and ends within a second or two gets its database
    record from its steps first, named "allocation" (the lines recorded on
    the dev cluster): the end is there seconds before the name is. The same
    start says it is the same job; another start, an older job under the id."""
    live = parse_squeue("36|COMPLETED|None|1796531449|node1|div-run-rvwx|N/A|1\n"
                        "37|RUNNING|None|1796531500|node1|div-run-b||1\n")
    accounted = parse_sacct(
        "36|COMPLETED|0:0|1796531449|1796531450|1|node1|None|allocation|\n"
        "36.batch|COMPLETED|0:0|1796531449|1796531450|1|node1||batch|\n"
        "37|COMPLETED|0:0|1796000000|1796000100|100|node1|None|allocation|\n")
    merged = merge(live, accounted, now=1796531452)
    assert merged["36"].finished
    assert (merged["36"].exit_code, merged["36"].elapsed_seconds) == (0, 1)
    assert (merged["37"].state, merged["37"].end) == ("RUNNING", None)


def test_with_squeue_alone_an_ended_job_accrues_nothing_more():
    # slurmdbd down: squeue still lists jobs that ended (MinJobAge), sacct nothing.
    merged = merge(parse_squeue("70|COMPLETED|None|1000|node1|div-run||1\n"
                                "71|CANCELLED|None|1200||div-run||1\n"
                                "72|RUNNING|None|1000|node1|div-run||1\n"), {}, now=5000)
    assert [merged[j].elapsed_seconds for j in ("70", "71", "72")] == [None, None, 4000]
    assert not merged["70"].finished


def test_a_job_canceled_before_it_got_a_node_is_final_in_squeue_alone():
    """A sweep's member canceled while it waited has no sacct record of its
    own: squeue's CANCELLED without a node is all there will be. One that
    ran, and a job of its own, wait for accounting's end."""
    live = parse_squeue("90_3|CANCELLED|None|1200||div-sweep-ab12||1\n"
                        "90_4|CANCELLED|None|1000|node1|div-sweep-ab12||1\n"
                        "91|CANCELLED|None|1200||div-run||1\n")
    assert live["90_3"].finished
    assert not live["90_4"].finished and not live["91"].finished
    # Its start is Slurm's estimate, never a start to bill from.
    assert live["90_3"].start is None and live["90_4"].start == 1000


def test_a_requeued_job_is_one_record_with_every_attempt_s_seconds():
    # sacct --duplicates after a node failure: the attempt that failed, then the one now.
    accounted = parse_sacct("80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"
                            "80.batch|CANCELLED|0:15|1000|1070|70|node2||div-run|\n"
                            "80|COMPLETED|0:0|1100|1130|30|node3|None|div-run|\n")
    record = accounted["80"]
    assert (record.state, record.restarts, record.earlier_seconds, record.elapsed_seconds) == \
        ("COMPLETED", 1, 70, 100)
    # Requeued and waiting: the ended attempt's line only, or a REQUEUED one.
    waiting = merge(parse_squeue("80|PENDING|BeginTime|1200||div-run||1\n"),
                    parse_sacct("80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"), now=1150)
    assert (waiting["80"].state, waiting["80"].restarts, waiting["80"].elapsed_seconds) == \
        ("PENDING", 1, 70)
    requeued = parse_sacct("81|REQUEUED|0:0|1000|1010|10|node1|None|div-run|\n")["81"]
    assert not requeued.finished and (requeued.restarts, requeued.earlier_seconds) == (1, 10)
    # Running again before sacct has its line: the live attempt adds to the earlier ones.
    again = merge(parse_squeue("80|RUNNING|None|1100|node3|div-run||1\n"),
                  parse_sacct("80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"), now=1120)
    assert (again["80"].state, again["80"].restarts, again["80"].elapsed_seconds) == \
        ("RUNNING", 1, 90)
    # Torn down after the node failure, or squeue refusing the list: not an end.
    # (counted a restart once squeue shows it requeued).
    for squeue, restarts in (("80|REQUEUED|None|1000|node2|div-run||1\n", 1),
                             ("80|COMPLETING|None|1000|node2|div-run||1\n", 0), ("", 0)):
        pending = merge(parse_squeue(squeue), parse_sacct(
            "80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"), now=1100)["80"]
        assert (pending.finished, pending.restarts, pending.elapsed_seconds) == \
            (False, restarts, 70), squeue
    # An ordinary end torn down is an end, and no restart.
    ended = merge(parse_squeue("84|COMPLETING|None|1000|node1|div-run||1\n"),
                  parse_sacct("84|FAILED|1:0|1000|1000|0|node1|None|div-run|\n"), now=1001)["84"]
    assert ended.finished and ended.restarts == 0
    # A sacct REQUEUED line and squeue still at the old start: nothing accrues twice.
    waits = merge(parse_squeue("85|REQUEUED|None|1000|node1|div-run||1\n"),
                  parse_sacct("85|REQUEUED|0:0|1000|1060|60|node1|None|div-run|\n"), now=1500)["85"]
    assert (waits.restarts, waits.elapsed_seconds) == (1, 60)
    # A job of another name under the same id (squeue is newer than sacct):
    fresh = merge(parse_squeue("86|RUNNING|None|1000|node1|div-run||1\n"),
                  parse_sacct("86|COMPLETED|0:0|100|7300|7200|node1|None|div-old|\n"), now=1010)
    assert (fresh["86"].restarts, fresh["86"].elapsed_seconds) == (0, 10)
    # Long after, with squeue silent, the end is final.
    assert merge({}, parse_sacct("80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"),
                 now=5000)["80"].finished
    # A REQUEUED line then the attempt after it: one restart, not two.
    assert parse_sacct("82|REQUEUED|0:0|1000|1010|10|node1|None|div-run|\n"
                       "82|RUNNING|0:0|1020|Unknown|5|node2|None|div-run|\n")["82"].restarts == 1
    # An older job under the same id (Slurm's counter was reset) is not an attempt.
    reused = parse_sacct("83|COMPLETED|0:0|100|200|100|node1|None|div-old|\n"
                         "83|RUNNING|0:0|1000|Unknown|5|node1|None|div-run|\n")["83"]
    assert (reused.restarts, reused.elapsed_seconds) == (0, 5)
    # ... and once it has: the same.
    later = merge(parse_squeue("80|RUNNING|None|1100|node3|div-run||1\n"),
                  parse_sacct("80|NODE_FAIL|0:0|1000|1070|70|node2|None|div-run|\n"
                              "80|RUNNING|0:0|1100|Unknown|20|node3|None|div-run|\n"), now=1120)
    assert (later["80"].restarts, later["80"].elapsed_seconds) == (1, 90)


def test_states_map_as_the_design_says():
    records = parse_sacct(SACCT)
    assert [run_status(records[j]) for j in ("41", "42", "43", "44", "45")] == [
        "succeeded", "failed", "canceled", "queued", "failed"]
    assert run_status(JobRecord("1", "TIMEOUT")) == "budget_exceeded"
    assert run_status(records["43"], stopped_for="budget_exceeded") == "budget_exceeded"


SINFO = (
    "gpu1|mix|12/52/0/64|344064|h100*|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-1,5)\n"
    "gpu1|mix|12/52/0/64|344064|debug|gpu:h100:8(S:0-1)|gpu:h100:3(IDX:0-1,5)\n"
    "gpu2|down*|0/0/64/64|344064|h100*|gpu:h100:8|gpu:h100:0(IDX:N/A)\n"
    "gpu3|idle~|0/64/0/64|262144|l40s|gpu:l40s:4,gpu:8|gpu:l40s:0(IDX:N/A),gpu:0\n"
    "cpu1|drain|0/0/32/32|131072|cpu|(null)|gpu:0\n"
)


def test_sinfo_lines_become_one_record_per_node():
    nodes = parse_sinfo_nodes(SINFO)
    assert list(nodes) == ["gpu1", "gpu2", "gpu3", "cpu1"]
    gpu1 = nodes["gpu1"]
    assert gpu1.partitions == ["h100", "debug"]
    assert (gpu1.cpus_used, gpu1.cpus_total) == (12, 64)
    assert (gpu1.gpus, gpu1.gpus_used) == ({"h100": 8}, {"h100": 3})   # commas inside IDX
    assert nodes["gpu3"].gpus == {"l40s": 4, "": 8}
    assert nodes["cpu1"].gpus == {}
    assert nodes["cpu1"].memory_mib == 131072
    assert [n.schedulable for n in nodes.values()] == [True, False, True, False]


def test_gres_other_than_gpus_is_not_counted():
    assert parse_gres("gpu:a100:2(S:0),shard:a100:16,mps:100") == {"a100": 2}


def test_slurm_time_limits_are_whole_minutes_rounded_down():
    texts = ["infinite", "UNLIMITED", "30", "30:45", "2:00:00", "1-00:00:00", "1-12", "1-12:30",
             "junk"]
    assert [slurm_minutes(t) for t in texts] == [None, None, 30, 30, 120, 1440, 2160, 2190, None]


def test_both_answers_count_a_job_s_gpus_by_type():
    # As Slurm 22.05 prints them: squeue's request per node, sacct's ReqTRES per job.
    live = parse_squeue("70|PENDING|Resources|N/A||div-a|gres:gpu:h100:8|2\n"
                        "71|RUNNING|None|1000|node1|div-b|gres:gpu:3|1\n"
                        "72|RUNNING|None|1000|node1|div-c|N/A|1\n")
    assert [live[j].gpus for j in ("70", "71", "72")] == [{"h100": 16}, {"": 3}, {}]
    accounted = parse_sacct(
        "70|COMPLETED|0:0|1000|1010|10|node[1-2]|None|div-a|"
        "billing=16,cpu=4,gres/gpu:h100=16,gres/gpu=16,mem=32G,node=2\n"
        "71|COMPLETED|0:0|1000|1010|10|node1|None|div-b|billing=1,cpu=1,gres/gpu=3,node=1\n"
        "72|COMPLETED|0:0|1000|1010|10|node1|None|div-c|billing=1,cpu=1,mem=1G,node=1\n")
    assert [accounted[j].gpus for j in ("70", "71", "72")] == [{"h100": 16}, {"": 3}, {}]
