"""What a run uses, from the parts that need no cluster: the sampler's
readings of cgroups and nvidia-smi, sacct's usage fields, the server's
checks of a sample line, the run's figures, the last line's hint, the idle
policy's steps, the site's [usage] settings, and what admins see (/metrics,
flask usage). The dev cluster's end to end: tests/test_usage.py."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest

import divergent.app.services.runs.usage as usage_module
from divergent.app.extensions import db
from divergent.app.models import Project, utcnow
from divergent.app.services.accounts.orgs import get_or_create_org, get_or_create_user
from divergent.app.services.cluster.gpu_use import gpu_hours_efficiency, gpus_in_use
from divergent.app.services.money.usage import month_bounds
from divergent.app.services.runs.idle import STOP, WARN, idle_notice, idle_step, stopped_line
from divergent.app.services.runs.usage import (
    GIB,
    NO_GPU_TELEMETRY,
    last_samples,
    over_asked,
    parse_sample,
    summarize,
    system_charts,
    usage_json,
)
from divergent.app.services.site.usage import UsageSettings, UsageSettingsError, usage_settings
from divergent.slurm.records import JobUsage, cpu_time, parse_sacct
from tests.test_models import make_run

SAMPLER = Path(__file__).resolve().parent.parent / "slurm" / "batch" / "usage.py"
_spec = importlib.util.spec_from_file_location("sampler", SAMPLER)
sampler = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sampler)

# `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,power.draw
# --format=csv,noheader,nounits` in the shape NVIDIA documents: no GPU was at
# hand to record it from (see the note); the values are an 8-GPU
# node's with two GPUs of another run hidden by -i, one without power readings.
NVIDIA_SMI = """0, 97, 71234, 612.45
1, 3, 1024, 88.10
3, 0, 0, [N/A]
4, [Not Supported], 512, 70.00
"""


def test_nvidia_smi_lines_become_utilization_bytes_and_watts():
    assert sampler.parse_nvidia_smi(NVIDIA_SMI) == [
        [97.0, 71234 * 1024 * 1024, 612.45], [3.0, 1024 * 1024 * 1024, 88.1],
        [0.0, 0, None], [None, 512 * 1024 * 1024, 70.0]]
    assert sampler.parse_nvidia_smi("No devices were found\n") == []


def test_a_failed_nvidia_smi_loses_no_totals_and_adds_nothing(monkeypatch):
    answers = iter([[[100.0, 1024, 300.0]], None, [[0.0, 2048, 80.0]]])
    monkeypatch.setattr(sampler, "gpu_sample", lambda devices: next(answers))
    totals = sampler.Totals(0, {}, "0")
    lines = [totals.sample() for _ in range(3)] + [totals.sample(gpus_too=False)]
    assert [line["gpus"] is None for line in lines] == [False, True, False, True]
    assert all(line["gpu_s"] is not None for line in lines)       # never blanked
    assert lines[-1]["gpu_memory_peak"] == 2048
    assert lines[-1]["gpu_busy_s"] <= lines[-1]["gpu_s"]


def test_the_sampler_asks_for_the_jobs_own_gpus_by_slurms_global_ids():
    assert sampler.job_gpus({"SLURM_STEP_GPUS": "4,5", "CUDA_VISIBLE_DEVICES": "0,1"}) == "4,5"
    assert sampler.job_gpus({"SLURM_JOB_GPUS": "7", "CUDA_VISIBLE_DEVICES": "0"}) == "7"
    assert sampler.job_gpus({"CUDA_VISIBLE_DEVICES": "2"}) == "2"
    assert sampler.job_gpus({"CUDA_VISIBLE_DEVICES": "GPU-5d1c;rm -rf /"}) == ""
    assert sampler.job_gpus({}) == ""


def test_the_sampler_reads_the_job_level_cgroup_of_v1_and_v2():
    v1 = ["12:memory:/slurm_node1/uid_1000/job_42/step_0/task_0\n",
          "4:cpu,cpuacct:/slurm_node1/uid_1000/job_42/step_0/task_0\n",
          "1:name=systemd:/user.slice\n"]
    groups = sampler.job_cgroups(v1)
    assert groups["memory"] == "/sys/fs/cgroup/memory/slurm_node1/uid_1000/job_42"
    # Under "cpu,cpuacct" where the node mounts them together, else "cpuacct".
    assert groups["cpuacct"].startswith("/sys/fs/cgroup/cpu")
    assert groups["cpuacct"].endswith("/slurm_node1/uid_1000/job_42")
    v2 = sampler.job_cgroups(["0::/system.slice/slurmstepd.scope/job_7/step_1/user/task_0\n"])
    assert v2["unified"].endswith("/system.slice/slurmstepd.scope/job_7")


def test_the_sampler_reads_cpu_and_memory_from_cgroup_files(tmp_path, monkeypatch):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.stat").write_text("cache 999\ntotal_rss 1000\ntotal_shmem 24\n")
    (tmp_path / "cpuacct").mkdir()
    (tmp_path / "cpuacct" / "cpuacct.usage").write_text("2500000000\n")
    groups = {"memory": str(tmp_path / "memory"), "cpuacct": str(tmp_path / "cpuacct")}
    assert sampler.memory_bytes(groups) == 1024
    assert sampler.cpu_seconds(groups) == 2.5
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1\n")
    (tmp_path / "v2" / "memory.stat").write_text("anon 4096\nfile 9999\nshmem 4\n")
    assert sampler.cpu_seconds({"unified": str(tmp_path / "v2")}) == 1.5
    assert sampler.memory_bytes({"unified": str(tmp_path / "v2")}) == 4100
    assert sampler.cpu_seconds({}) is None and sampler.gpu_sample("") is None


def test_sacct_usage_fields():
    assert cpu_time("01:10.500") == 70.5
    assert cpu_time("1:02:03") == 3723
    assert cpu_time("2-00:00:01") == 172801
    assert cpu_time("") is None and cpu_time("abc") is None
    job = "|COMPLETED|0:0|1000|1070|70|node1|None|div-run-x|billing=2,cpu=2,mem=4G,node=1|"
    records = parse_sacct(
        f"87{job}01:10.000|\n"
        "87.batch|COMPLETED|0:0|1000|1070|70|node1|None|batch||00:00.100|cpu=00:00:00,mem=4M\n"
        "87.0|COMPLETED|0:0|1000|1070|70|node1|None|bash||01:09.900|"
        "cpu=00:01:09,energy=0,mem=1060M,gres/gpumem=40G,gres/gpuutil=87\n"
        f"88_3{job}00:01.000|\n"
        "89|COMPLETED|0:0|1000|1070|70|node1|None|div-run-y|cpu=1\n")   # fields of old
    assert records["87"].usage == JobUsage(70.0, 1060 * 2**20, 40 * 2**30, 0.87)
    assert records["88_3"].usage == JobUsage(1.0, None, None, None)
    assert records["89"].usage is None and records["89"].state == "COMPLETED"


def sample(**values) -> bytes:
    line = {"time": 1100.0, "start": 1000.0, "attempt": 0, "cpu_s": 50.0, "memory": 2 * GIB,
            "memory_peak": 3 * GIB, "gpus": None, "gpu_busy_s": None, "gpu_s": None,
            "gpu_memory_peak": None}
    line.update(values)
    return json.dumps(line).encode()


@pytest.mark.parametrize("line", [
    b"", b"[1]", b"{", b"[" * 100_000, sample(time=900.0), sample(start="x"),
    sample(time=float("inf")),
])
def test_a_line_that_is_not_a_sample_is_skipped(line):
    assert parse_sample(line) is None


def test_a_samples_figures_are_checked_one_by_one():
    parsed = parse_sample(sample(cpu_s=-5, memory=1e30, gpus=[[50, 1, 2, 99], "x", [True]] * 50))
    assert parsed["cpu_s"] is None and parsed["memory"] is None
    assert len(parsed["gpus"]) == 43        # of the first 64 entries, the lists
    assert parsed["gpus"][:2] == [[50.0, 1.0, 2.0], [None, None, None]]


@pytest.fixture
def runs(app_context):
    org = get_or_create_org("acme")
    user = get_or_create_user(org, "ada")
    project = Project(org_id=org.id, name="p")
    db.session.add(project)
    db.session.flush()

    made_runs = []

    def run(**fields):
        made = make_run(org, user, project, name=f"r{len(made_runs)}", **fields)
        made_runs.append(made)
        db.session.add(made)
        db.session.flush()
        return made
    return run


def test_the_figures_of_a_two_node_gpu_run(runs):
    run = runs(gpus=16, cpus=16, memory_gib=128)
    nodes = [parse_sample(sample(cpu_s=400.0, memory_peak=5 * GIB, gpu_busy_s=80.0, gpu_s=800.0,
                                 gpu_memory_peak=30 * GIB)),
             parse_sample(sample(cpu_s=0.0, memory_peak=1 * GIB, gpu_busy_s=0.0, gpu_s=800.0,
                                 gpu_memory_peak=0))]
    usage = summarize(run, nodes)
    # 400 core-seconds of 2 nodes x 100 s x 8 cores; 80 of 1600 GPU-seconds;
    # memory is one node's, peak and asked for alike.
    assert usage == {"cpu_efficiency": 0.25, "max_memory_bytes": 5 * GIB,
                     "memory_requested_bytes": 64 * GIB, "gpu_utilization": 0.05,
                     "gpu_memory_max_bytes": 30 * GIB, "gpu_note": None, "source": "sampler"}
    # At the end Slurm's accounting wins for CPU, and the higher peak for memory.
    final = summarize(run, nodes, JobUsage(cpu_seconds=800.0, max_memory_bytes=6 * GIB), 100)
    assert final["cpu_efficiency"] == 0.5 and final["max_memory_bytes"] == 6 * GIB
    assert final["source"] == "slurm" and final["gpu_utilization"] == 0.05
    # Accounting that missed the work (a killed step's 0) never lowers what was measured.
    assert summarize(run, nodes, JobUsage(cpu_seconds=0.0), 100)["cpu_efficiency"] == 0.25


def test_a_node_that_measured_no_cpu_time_is_left_out_not_counted_idle(runs):
    run = runs(gpus=16, cpus=16, memory_gib=128)
    nodes = [parse_sample(sample(cpu_s=800.0)), parse_sample(sample(cpu_s=None))]
    assert summarize(run, nodes)["cpu_efficiency"] == 1.0


def test_gpus_without_telemetry_are_null_and_say_so(runs):
    gpu_run, cpu_run = runs(gpus=2), runs(gpu_type="cpu", gpus=1, cpus=2, memory_gib=4)
    nodes = [parse_sample(sample())]
    assert summarize(gpu_run, nodes)["gpu_utilization"] is None
    assert summarize(gpu_run, nodes)["gpu_note"] == NO_GPU_TELEMETRY
    assert summarize(cpu_run, nodes)["gpu_note"] is None
    assert summarize(cpu_run, nodes)["gpu_memory_max_bytes"] is None
    # Nothing measured yet (queued): nulls, the note included.
    assert usage_json(gpu_run) == {"cpu_efficiency": None, "max_memory_bytes": None,
                                   "memory_requested_bytes": 64 * GIB, "gpu_utilization": None,
                                   "gpu_memory_max_bytes": None, "gpu_note": None,
                                   "source": None}


def test_one_hint_only_when_a_run_clearly_over_asked(runs):
    def hinted(run, **usage):
        run.usage = {"source": "slurm", **usage}
        return over_asked(run)
    long = dict(elapsed_seconds=600)
    assert hinted(runs(gpus=8, **long), gpu_utilization=0.09) == "used 9% of its 8 GPUs"
    assert hinted(runs(gpus=1, **long), gpu_utilization=0.2) == "used 20% of its GPU"
    assert hinted(runs(gpus=8, **long), gpu_utilization=0.6) is None
    assert hinted(runs(memory_gib=64, **long), max_memory_bytes=int(3.1 * GIB)) == \
        "peak memory 3.1 GiB of 64 GiB"
    # What a GPU includes was not asked for: nothing to say of it.
    assert hinted(runs(memory_gib=8, cpus=1, **long), max_memory_bytes=0,
                  cpu_efficiency=0.0) is None
    assert hinted(runs(gpu_type="cpu", cpus=1, memory_gib=4, **long),
                  max_memory_bytes=0) is None      # small asks
    assert hinted(runs(gpu_type="cpu", cpus=8, memory_gib=4, **long),
                  cpu_efficiency=0.1) == "used 0.8 of its 8 cores"
    assert hinted(runs(gpus=8, elapsed_seconds=30), gpu_utilization=0.0) is None   # too short


def test_system_charts_from_the_nodes_files(tmp_path):
    lines = [sample(time=1000.0 + t, cpu_s=t * 1.0, memory=GIB, gpus=[[50, GIB, 300.0]])
             for t in (0, 2, 4)]
    (tmp_path / "usage.0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "usage.1.jsonl").write_bytes(sample(attempt=0) + b"\nnot json\n")
    (tmp_path / "usage.x.jsonl").write_bytes(b"ignored")
    (tmp_path / "usage.2.jsonl").symlink_to("/etc/passwd")
    charts = {c["title"]: c for c in system_charts(str(tmp_path))}
    assert set(charts) == {"CPU cores in use", "Memory (GiB)", "GPU utilization (%)",
                           "GPU memory (GiB)", "GPU power (W)"}
    cpu = charts["CPU cores in use"]
    assert cpu["metrics"] == ["node 0", "node 1"]
    assert cpu["data"][0] == [0.0, 2.0, 4.0, 100.0] and cpu["data"][1][1:3] == [1.0, 1.0]
    assert charts["GPU utilization (%)"]["metrics"] == ["node 0 gpu 0"]
    assert [s["cpu_s"] for s in last_samples(str(tmp_path))] == [4.0, 50.0]


def test_a_reading_takes_each_nodes_newest_whole_sample(tmp_path):
    # Longer than the tail read, a line being written at its end: the
    # newest whole line is the reading (its totals are the run's so far).
    lines = [sample(time=1000.0 + t, cpu_s=float(t)) for t in range(200)]
    (tmp_path / "usage.0.jsonl").write_bytes(b"\n".join(lines) + b"\n" + lines[0][:40])
    assert len(lines[0]) * 200 > 16 * 1024
    assert [s["cpu_s"] for s in last_samples(str(tmp_path))] == [199.0]


def test_a_file_of_garbage_costs_a_reading_a_few_lines(tmp_path, monkeypatch):
    # What a compromised node could leave: 256 files of lines that are no
    # samples. The reconciler's cycle every org shares parses a few of each.
    for node in range(256):
        (tmp_path / f"usage.{node}.jsonl").write_bytes(sample(cpu_s=1.0) + b"\n" + b"[]\n" * 6000)
    parsed = []
    real = usage_module.parse_sample
    monkeypatch.setattr(usage_module, "parse_sample", lambda line: parsed.append(line) or real(line))
    assert last_samples(str(tmp_path)) == []
    assert len(parsed) == 256 * usage_module.NEWEST_LINES


def test_the_sampler_outlives_a_full_share_and_a_kill_leaves_no_notice(tmp_path):
    # /dev/full: every write fails (ENOSPC); the sampler carries on and ends
    # with the process it watches.
    watched = subprocess.Popen(["sleep", "2"])
    threading.Thread(target=watched.wait).start()      # reaped as it ends, no zombie
    sampler = subprocess.run([sys.executable, str(SAMPLER), "/dev/full", "1", str(watched.pid)],
                             capture_output=True, text=True, timeout=30)
    assert sampler.returncode == 0, sampler.stderr
    # Killed by anyone (the run itself, under pyxis, or the OOM killer), the
    # sampler is no job notice of the node function's in the run's log.
    node = Path(__file__).resolve().parent.parent / "slurm" / "batch" / "node.sh"
    script = (f"source {node}\n"
              "sleep 2 & div_child=$!\n"
              "div_usage_interval=1 div_state=$1 SLURM_NODEID=0 div_usage='import time\n"
              "time.sleep(60)'\n"
              "div_sample\n"
              "(sleep 0.5; kill -9 $div_sampler) &\n"
              "wait $div_child\n"
              "div_sampled\n"
              "echo ended\n")
    ended = subprocess.run(["bash", "-c", script, "node", str(tmp_path)], capture_output=True,
                           text=True, timeout=30)
    assert ended.stdout == "ended\n" and ended.stderr == "", ended.stderr


def test_the_charts_of_a_long_file_span_it_at_a_coarser_grain(tmp_path, monkeypatch):
    monkeypatch.setattr("divergent.app.services.runs.usage.SERIES_BYTES", 8192)
    monkeypatch.setattr("divergent.app.services.runs.usage.SPREAD", 8)
    monkeypatch.setattr("divergent.app.services.runs.usage.SPREAD_PIECE", 1024)
    lines = [sample(time=1000.0 + t, cpu_s=float(t)) for t in range(2000)]
    (tmp_path / "usage.0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    seconds = system_charts(str(tmp_path))[0]["data"][0]
    # About 8 KiB of 2000 lines, from the first to the last.
    assert 16 < len(seconds) < 48 and seconds[0] < 10 and seconds[-1] == 1999.0
    assert seconds == sorted(seconds)


def reading(t: float, cpu_s: float, node: int = 0, **more) -> dict:
    return {**parse_sample(sample(time=1000.0 + t, cpu_s=cpu_s, **more)), "node": node}


def test_the_idle_policy_warns_then_stops_and_busy_moments_reset_it(runs):
    settings = UsageSettings(interval_seconds=1, idle_below=0.1, idle_warn_minutes=1,
                             idle_stop_minutes=1, idle_measure="cpu")
    run = runs(gpu_type="cpu", cpus=1, memory_gib=2, status="running")
    steps = []
    for t, cpu in ((0, 0), (30, 1), (60, 2), (90, 60), (120, 61), (180, 62), (200, 63),
                   (240, 64)):
        action, run.idle = idle_step(run, [reading(t, cpu)], settings, now=1000.0 + t)
        steps.append(action)
    # Idle from 0: warned at 60; busy 60-90 (58 of 30 s) starts it over;
    # idle from 90: warned again at 180 (90 s), stopped a minute after (240).
    assert steps == [None, None, WARN, None, None, WARN, None, STOP]
    assert stopped_line(run) == "its CPUs stayed under 10% utilization for 2.5 minutes"
    assert idle_step(run, [reading(300, 65)], settings, now=1300.0)[0] is None   # asked once


def test_nobody_is_stopped_unwarned_and_a_new_attempt_starts_from_nothing(runs):
    settings = UsageSettings(interval_seconds=1, idle_below=0.1, idle_warn_minutes=1,
                             idle_stop_minutes=1, idle_measure="cpu")
    run = runs(gpu_type="cpu", cpus=1, memory_gib=2, status="running")

    def step(t: float, now: float, attempt: int = 0) -> str | None:
        action, run.idle = idle_step(run, [reading(t, 0.0, attempt=attempt)], settings, now)
        return action
    assert step(0, 0) is None
    # The server away 90 minutes (or a node's clock ahead): warned, not stopped.
    assert step(5400, 10) == WARN
    assert step(5430, 40) is None              # 30 s after the warning, by the server's clock
    # The run's page says when it will be stopped (a minute after the warning at 10).
    assert idle_notice(run, settings) == ("Its CPUs have stayed under 10% utilization: the "
                                          "site's idle policy stops it at 00:01 UTC unless "
                                          "they are used.")
    # Restarted on another node: its idle time starts again, warning included.
    assert step(10, 80, attempt=1) is None
    assert step(100, 170, attempt=1) == WARN
    # Nothing read once (the share failing) changes nothing, the warning included.
    assert idle_step(run, [], settings, 200)[1] == run.idle


def test_a_node_missing_from_one_reading_never_counts_its_past_as_busy_now(runs):
    settings = UsageSettings(interval_seconds=1, idle_below=0.1, idle_warn_minutes=1,
                             idle_stop_minutes=1, idle_measure="gpu")
    run = runs(gpus=16, cpus=16, memory_gib=128, status="running")

    def step(t: float, nodes: list[int]) -> str | None:
        # Node 0 was busy for an hour before; both idle since.
        samples = [reading(t, 0.0, node, gpu_busy_s=3600.0 * 8 if node == 0 else 0.0,
                           gpu_s=8 * (3600.0 + t)) for node in nodes]
        action, run.idle = idle_step(run, samples, settings, now=1000.0 + t)
        return action
    assert [step(0, [0, 1]), step(30, [0, 1]), step(60, [0, 1])] == [None, None, WARN]
    assert step(90, [1]) is None               # node 0's GPUs not read this time
    assert step(150, [0, 1]) == STOP           # back, as idle as before


def test_the_month_efficiency_and_gpus_in_use(runs):
    now = utcnow()
    runs(gpus=4, status="running", usage={"gpu_utilization": 0.5})
    runs(gpus=4, status="running", usage=None)
    runs(gpu_type="a100", gpus=2, status="running", usage={"gpu_utilization": None})
    runs(gpus=2, status="succeeded", elapsed_seconds=3600, created_at=now,
         usage={"gpu_utilization": 0.25})
    db.session.commit()
    use = {(u.org, u.gpu): u for u in gpus_in_use()}
    assert use[("acme", "h100")].allocated == 8 and use[("acme", "h100")].used_gpus == 4.0
    assert use[("acme", "a100")].used_gpus is None
    start, end, _ = month_bounds()
    org = get_or_create_org("acme")
    assert gpu_hours_efficiency(org.id, start, end) == (2.0, 0.25)
    assert gpu_hours_efficiency(org.id, start - timedelta(days=40), start)[1] is None


@pytest.mark.parametrize("table,message", [
    ({"interval_seconds": -1}, "interval_seconds"),
    ({"interval_seconds": True}, "interval_seconds"),
    ({"idle_below": 0}, "idle_below"),
    ({"idle_measure": "disk"}, "idle_measure"),
    ({"idle_warn_minutes": 0}, "idle_warn_minutes"),
    ({"idle_stop_minutes": "5"}, "idle_stop_minutes"),
    ({"idle": 1}, "unknown"),
])
def test_bad_usage_settings_say_what_is_wrong(table, message):
    with pytest.raises(UsageSettingsError, match=message):
        usage_settings(table)


def test_the_idle_policy_is_off_by_default():
    assert not UsageSettings().idle_policy
    assert usage_settings({"idle_warn_minutes": 0.5}).idle_policy


def test_garbage_figures_from_a_sample_or_sacct_are_none_never_an_error():
    for garbage in (10 ** 400, -1, float("nan"), float("inf")):
        assert parse_sample(sample(cpu_s=garbage))["cpu_s"] is None, garbage
    for text in ("9" * 400 + "-00:00", ":".join(["1"] * 200), "-1-00:00", "nan:00", "inf:00"):
        assert cpu_time(text) is None, text
    job = "|COMPLETED|0:0|1000|1070|70|node1|None|div-run-x||"
    records = parse_sacct(f"87{job}01:00.000|\n87.0{job[:-1]}|00:01.000|mem=" + "9" * 400 + "\n")
    assert records["87"].usage == JobUsage(60.0, None, None, None)


def test_an_older_jobs_steps_under_a_reused_id_are_never_this_ones():
    job = "|COMPLETED|0:0|1000|1070|70|node1|None|div-run-x||"
    records = parse_sacct(f"87{job}01:00.000|\n87.0|COMPLETED|0:0|1000|1070|70|node1|None|bash||"
                          "00:01.000|mem=100G,gres/gpuutil=100\n"
                          f"87{job}00:30.000|\n87.0|COMPLETED|0:0|1000|1070|70|node1|None|bash||"
                          "00:01.000|mem=1G\n")
    assert records["87"].usage == JobUsage(30.0, 1 << 30, None, None)
