"""The Slurm adapter against the real dev cluster, through each way in (the
commands here, over SSH, pyslurm): what a run sees, how it ends, what Slurm
refuses, and that all three read the same jobs the same."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from divergent.app.services.accounts.unix_users import HELPER
from divergent.app.services.cluster.capacity import gpu_capacity
from divergent.slurm.client import SlurmClient, SubmitRefused
from divergent.slurm.pyslurm_client import PyslurmClient
from divergent.slurm.records import run_status
from divergent.slurm.script import render_batch_script
from divergent.slurm.transport import LocalTransport, SSHTransport
from tests.jobs import SITE, spec_for, wait_for_end


def submit(slurm: SlurmClient, spec) -> str:
    return slurm.submit(render_batch_script(spec, SITE))


def test_gpu_job_sees_code_and_volume_and_loses_scratch(slurm, job_dirs):
    state, volumes, code = job_dirs
    (code / "train.py").write_text("print('trained')\n")
    (volumes / "data" / "input.txt").write_text("dataset\n")
    command = (
        "python train.py && cat /mnt/data/input.txt && echo \"gpus=$CUDA_VISIBLE_DEVICES\" "
        "&& echo oops >&2 && echo ckpt > /mnt/data/ckpt.txt && echo tmp > /workspace/junk.txt "
        "&& mkdir -p /mnt/scratchy && head -c 2500000 /dev/zero > /mnt/scratchy/blob "
        "&& mkdir -p /mnt/tiny && head -c 1600 /dev/zero > /mnt/tiny/note && ls /mnt")
    job = submit(slurm, spec_for(job_dirs, command, gpu_type="h100", gpus=2, cpus=2,
                                 memory_gib=16))
    record = wait_for_end(slurm, job)

    assert (record.state, record.exit_code) == ("COMPLETED", 0)
    stdout = (state / "stdout").read_text()
    stderr = (state / "stderr").read_text()
    assert stdout.splitlines()[:2] == ["trained", "dataset"]
    assert len(stdout.split("gpus=")[1].split()[0].split(",")) == 2
    assert "oops" in stderr and "oops" not in stdout
    # What the run wrote to the volume stays; the rest of /mnt and /workspace go.
    assert (volumes / "data" / "ckpt.txt").read_text() == "ckpt\n"
    assert not (code / "junk.txt").exists()
    lost = stderr.rstrip().splitlines()[-2:]       # in the upload line's units, never 0.0 MB
    assert sorted(lost) == ["1.6 KB written to /mnt/tiny was lost: it is not a volume",
                            "2.5 MB written to /mnt/scratchy was lost: it is not a volume"]
    assert "scratchy" in stdout.split("gpus=")[1]


def test_exit_code_comes_back_as_failed(slurm, job_dirs):
    record = wait_for_end(slurm, submit(slurm, spec_for(job_dirs, "exit 3")))
    assert (record.state, record.exit_code, run_status(record)) == ("FAILED", 3, "failed")


def test_cancel_ends_as_cancelled(slurm, job_dirs):
    job = submit(slurm, spec_for(job_dirs, "sleep 300"))
    _wait_running(slurm, job)
    slurm.cancel(job)
    record = wait_for_end(slurm, job)
    assert record.state == "CANCELLED"
    assert run_status(record) == "canceled"
    assert run_status(record, stopped_for="limit_reached") == "limit_reached"


def test_elapsed_seconds_come_from_sacct(slurm, job_dirs):
    record = wait_for_end(slurm, submit(slurm, spec_for(job_dirs, "sleep 3")))
    assert record.state == "COMPLETED"
    assert 3 <= record.elapsed_seconds <= 6
    assert record.end - record.start == record.elapsed_seconds


RENDEZVOUS = r'''
import os, socket, sys
rank = int(os.environ["NODE_RANK"])
print("rank", rank, "of", os.environ["NNODES"], "on", socket.gethostname(),
      "slurm node", os.environ["SLURM_NODEID"], "master", os.environ["MASTER_ADDR"], flush=True)
addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
if rank == 0:
    server = socket.create_server(("0.0.0.0", addr[1]))
    server.settimeout(30)
    conn, _ = server.accept()
    print("rank 0 got", conn.recv(100).decode(), flush=True)
else:
    import time
    for _ in range(100):
        try:
            socket.create_connection(addr, 1).sendall(b"hello from " + socket.gethostname().encode())
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("rank 1 could not reach rank 0")
'''


def test_sixteen_gpus_run_on_two_nodes_that_reach_each_other(slurm, job_dirs):
    state, _, code = job_dirs
    (code / "rendezvous.py").write_text(RENDEZVOUS)
    job = submit(slurm, spec_for(job_dirs, "python rendezvous.py", gpu_type="h100", gpus=16,
                                 cpus=2, memory_gib=16))
    record = wait_for_end(slurm, job)
    stdout = (state / "stdout").read_text()
    assert (record.state, record.exit_code) == ("COMPLETED", 0), stdout + (state / "stderr").read_text()
    # Whichever two nodes Slurm chose (other tests' jobs share the cluster),
    # as the ranks saw them.
    hosts = dict(re.findall(r"^rank (\d) of 2 on (node\d) ", stdout, re.M))
    first, second = hosts.get("0"), hosts.get("1")
    assert first and second and first != second, stdout
    assert f"rank 0 of 2 on {first} slurm node 0 master {first}" in stdout
    assert f"rank 1 of 2 on {second} slurm node 1 master {first}" in stdout
    assert f"rank 0 got hello from {second}" in stdout


def test_more_gpus_than_the_cluster_has_is_refused_at_submit(slurm, job_dirs):
    # Four nodes of eight: 40 H100s are five.
    with pytest.raises(SubmitRefused, match="^Slurm refused the job: Node count specification invalid$"):
        submit(slurm, spec_for(job_dirs, "true", gpu_type="h100", gpus=40, memory_gib=40))


def _three_ways(sshd) -> dict[str, SlurmClient]:
    return {"local": SlurmClient(LocalTransport()), "ssh": SlurmClient(SSHTransport(**sshd)),
            "pyslurm": PyslurmClient()}


def _dirs(base, name: str) -> list:
    dirs = [base / name / d for d in ("state", "org", "code")]
    for d in dirs:
        d.mkdir(parents=True)
    return dirs


def test_the_three_ways_in_agree_record_for_record(sshd, slurm_cluster, tmp_path):
    """Jobs submitted through each way in, ending each way a run can end,
    read through all three: the same records, live and final (state, exit
    code, times, elapsed seconds, nodes, GPUs)."""
    clients = _three_ways(sshd)
    kinds = {
        "two-h100": (dict(gpu_type="h100", gpus=2, cpus=2, memory_gib=4), "sleep 4"),
        "sixteen-h100": (dict(gpu_type="h100", gpus=16, cpus=2, memory_gib=4), "sleep 2"),
        "exit-3": ({}, "exit 3"),
        "out-of-memory": ({}, "python3 -c 'b = bytearray(3 << 30)'"),
        "canceled": ({}, "sleep 300"),
    }
    jobs = {}
    for i, (kind, (hardware, command)) in enumerate(kinds.items()):
        client = list(clients.values())[i % 3]
        jobs[kind] = submit(client, spec_for(_dirs(tmp_path, kind), command, **hardware))
    _wait_running(clients["local"], jobs["two-h100"])
    _wait_running(clients["local"], jobs["canceled"])
    live = {name: client.query([jobs["two-h100"]])[jobs["two-h100"]]
            for name, client in clients.items()}
    assert live["local"].state == "RUNNING" and live["local"].gpus == {"h100": 2}
    for record in live.values():
        # Elapsed seconds run on between the three reads.
        assert abs(record.elapsed_seconds - live["local"].elapsed_seconds) <= 2
        assert replace(record, elapsed_seconds=0) == replace(live["local"], elapsed_seconds=0)
    clients["pyslurm"].cancel(jobs["canceled"])
    for job in jobs.values():
        wait_for_end(clients["local"], job)
    ids = list(jobs.values())
    records = {name: client.query(ids) for name, client in clients.items()}
    assert records["ssh"] == records["local"]
    # pyslurm's records carry no usage (its sites get the samplers' figures):
    # all else is the same.
    assert {j: replace(r, usage=None) for j, r in records["local"].items()} == records["pyslurm"]
    final = {kind: records["local"][job] for kind, job in jobs.items()}
    # What it used, as sacct has it (TotalCPU, read for every finished job).
    assert final["two-h100"].usage is not None and final["two-h100"].usage.cpu_seconds is not None
    assert [(r.state, r.exit_code, r.gpus) for r in final.values()] == [
        ("COMPLETED", 0, {"h100": 2}), ("COMPLETED", 0, {"h100": 16}), ("FAILED", 3, {}),
        ("OUT_OF_MEMORY", 9, {}), ("CANCELLED", 0, {})]
    assert final["sixteen-h100"].nodes.count("node") == 1 and "-" in final["sixteen-h100"].nodes
    # `sleep 4` and the batch script around it, which under load takes
    # seconds more to start and end (seen: 7).
    assert 4 <= final["two-h100"].elapsed_seconds <= 10


# The node and the GPUs too: other tests' jobs share the cluster, so the
# three may land on different nodes, or other devices of one.
VARYING = re.compile(r"(SLURM_JOBID|SLURM_JOB_ID|\w*MASTER_PORT|SLURM_SRUN_COMM_PORT|"
                     r"SLURM_STEP_LAUNCHER_PORT|SLURM_TASK_PID|SLURM_SUBMIT_DIR|PWD|OLDPWD|"
                     r"HOSTNAME|SLURMD_NODENAME|SLURM_(JOB_|STEP_)?NODELIST|SLURM_TOPOLOGY_ADDR|"
                     r"\w*MASTER_ADDR|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|SLURM_(JOB|STEP)_GPUS)=")


# Whatever names the node by its address (SLURM_SRUN_COMM_HOST, ...).
NODE_ADDRESS = re.compile(r"=10\.77\.0\.\d+$")


def test_a_job_sees_the_same_environment_whichever_way_it_was_submitted(sshd, slurm_cluster,
                                                                         tmp_path):
    """pyslurm submits with what sbatch --export=NONE would give the job."""
    seen = {}
    for name, client in _three_ways(sshd).items():
        dirs = _dirs(tmp_path, name)
        record = wait_for_end(client, submit(client, spec_for(dirs, "env; umask", gpus=2, cpus=2)))
        assert record.state == "COMPLETED"
        lines = (dirs[0] / "stdout").read_text().splitlines()
        # Ids, ports, pids and the folder sbatch ran in differ; SLURM_TIME_FORMAT is
        # what the command transports set for sacct, and sbatch passes on;
        # DIV_* the script sets (DIV_DEADLINE once squeue knows the end).
        seen[name] = sorted(line.split("=", 1)[0] if VARYING.match(line) or NODE_ADDRESS.search(line)
                            else line
                            for line in lines if not line.startswith(("SLURM_TIME_FORMAT=", "DIV_")))
    assert "SLURM_CPUS_PER_TASK=2" in seen["local"] and "SLURM_EXPORT_ENV=NONE" in seen["local"]
    assert seen["pyslurm"] == seen["local"]
    assert seen["ssh"] == seen["local"]


WARNED = ("import signal, time; signal.signal(signal.SIGUSR1, lambda *_: print('warned', "
          "flush=True)); time.sleep(600)")


@pytest.mark.xdist_group("slurm-time-limit")   # a group: handed out first, its wait overlaps the rest
def test_a_two_minute_time_limit_ends_as_timeout_after_a_warning(sshd, slurm_cluster, tmp_path):
    """Every way in at once, since Slurm takes two minutes and more to end
    it; the run asked for the warning (--signal), and gets it whichever way
    it came in. Two minutes, not one: Slurm may send the warning up to a
    minute early (slurm/script.py WARNING_SECONDS), which for a one-minute
    run can be before its program has started to listen."""
    clients = list(_three_ways(sshd).values())
    jobs, states = [], []
    for i, client in enumerate(clients):
        dirs = _dirs(tmp_path, str(i))
        states.append(dirs[0])
        jobs.append(submit(client, spec_for(dirs, f'python3 -c "{WARNED}"',
                                            time_limit_minutes=2)))
    for client, job, state in zip(clients, jobs, states, strict=True):
        record = wait_for_end(client, job, timeout=210)
        assert record.state == "TIMEOUT"
        assert run_status(record) == "budget_exceeded"
        assert 120 <= record.elapsed_seconds <= 150
        assert (state / "stdout").read_text() == "warned\n", type(client).__name__


def _wait_running(slurm: SlurmClient, job: str) -> None:
    """Until the job runs and its prolog is over: a read while Slurm still
    gives "Prolog" as its reason would differ from the next one."""
    for _ in range(100):
        record = slurm.query([job])[job]
        if record.state == "RUNNING" and not record.reason:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not start")


def _b300s_held(slurm: SlurmClient) -> int:
    return sum(n.gpus_used.get("b300", 0) for n in slurm.nodes().values())


# One worker takes the three ways in, one after another: each holds the same
# B300s, which no other test's runs ask for, so what sinfo counts is this job's.
@pytest.mark.xdist_group("sinfo-b300")
def test_sinfo_counts_the_gpus_a_running_job_holds(slurm, job_dirs):
    assert _b300s_held(slurm) == 0
    job = submit(slurm, spec_for(job_dirs, "sleep 60", gpu_type="b300", gpus=3, cpus=3,
                                 memory_gib=8))
    try:
        _wait_running(slurm, job)
        nodes = slurm.nodes()
        assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
        assert _b300s_held(slurm) == 3
        assert sum(n.cpus_used for n in nodes.values()) >= 3
        b300 = next(row for row in gpu_capacity(list(nodes.values()), SITE)
                    if row.gpu_type == "b300")
        assert (b300.total, b300.used, b300.free, b300.unavailable) == (32, 3, 29, 0)
    finally:
        slurm.cancel(job)
        _wait_released(slurm)


def _wait_released(slurm: SlurmClient) -> None:
    """A cancelled job holds its GPUs while it completes; the next way in
    counts from zero."""
    for _ in range(300):
        if _b300s_held(slurm) == 0:
            return
        time.sleep(0.1)
    raise AssertionError("the cancelled job still holds its B300s after 30 s")


# An org's Unix user, made by the site's root helper as an org's first run
# makes it, and in a Slurm account of its own.
ORG_USER, ORG_ACCOUNT = "div-xport", "xport"


@pytest.fixture(scope="module")
def org_user(slurm_cluster) -> str:
    subprocess.run([HELPER, "make", ORG_USER], check=True)
    SlurmClient().ensure_account(ORG_ACCOUNT, users=(ORG_USER,))
    return ORG_USER


@pytest.fixture
def org_user_dirs(org_user):
    """job_dirs that only the org user's group (and root) may enter, under
    a folder that lets it through, as the share's are."""
    base = Path(tempfile.mkdtemp(prefix="div-xport-"))
    base.chmod(0o711)
    dirs = tuple(base / name for name in ("state", "org", "code"))
    for folder in (*dirs, base / "org" / "data"):
        folder.mkdir(mode=0o700)
        subprocess.run(["setfacl", "-m", f"g:{ORG_USER}:rwx", "-d", "-m", f"g:{ORG_USER}:rwx",
                        str(folder)], check=True)
    yield dirs
    shutil.rmtree(base)


def test_an_org_users_job_is_submitted_shortened_and_canceled_as_it_through_each_way_in(
        slurm, org_user_dirs):
    as_org = slurm.as_user(ORG_USER)
    spec = spec_for(org_user_dirs, "id -un; sleep 300", account=ORG_ACCOUNT)
    job = as_org.submit(render_batch_script(spec, SITE))
    _wait_running(slurm, job)
    stdout = org_user_dirs[0] / "stdout"
    for _ in range(100):            # the command has started, as its user
        if stdout.exists() and stdout.read_text():
            break
        time.sleep(0.1)
    assert stdout.read_text() == f"{ORG_USER}\n"
    as_org.shorten(job, 2)
    limit = subprocess.run(["squeue", "-h", "-j", job, "-o", "%l"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert limit == "2:00"
    as_org.cancel(job)
    assert wait_for_end(slurm, job).state == "CANCELLED"
    user = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "User", "-j", job],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert user == ORG_USER
