"""Faults injected into the real stack: Slurm's daemons stopped (slurmctld,
slurmdbd, a node's slurmd), the reconciler and the server SIGKILLed at the
worst moments, the database unavailable. Where the database's own behaviour
is what holds (transactions, a unique key, an outage) on SQLite and on
PostgreSQL; where Slurm's or the files' is, on PostgreSQL alone. Each
test asserts what the user saw, the runs' final states, their costs against
sacct (`flask charges`) and, for files, their bytes (sha256)."""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from divergent.slurm.client import SubmitNotReceived
from divergent.slurm.pyslurm_client import PyslurmClient
from divergent.slurm.script import render_batch_script
from tests.cluster_turns import cluster_turn
from tests.conftest import DEV_STATE, POSTGRES_URL, process_alive
from tests.jobs import SITE, spec_for
from tests.sshd import free_port
from tests.stack import ROOT, VENV_BIN, Stack, running_stack, service_folder

# Holds a real sbatch before or after it runs while a file is there, so the
# server can be killed with a run recorded and its job not yet made, or made
# and not yet recorded. Checks (--test-only) are never held. It stands in
# sudo's place on the server's PATH: the server submits as the org's Unix
# user (sudo -n -u USER -- sbatch ...).
SBATCH_HOLD = """#!/bin/bash
here=$(dirname "$0")
args=("$@")
for i in "${!args[@]}"; do
    [ "${args[$i]}" = -- ] && { command=${args[$((i + 1))]}; first=${args[$((i + 2))]:-}; break; }
done
hold() {
    [ "${command:-}" = sbatch ] && [ "$first" != --test-only ] || return 0
    while [ -e "$here/$1" ]; do sleep 0.1; done
}
hold hold-before
out=$({sudo} "$@"); rc=$?
hold hold-after
[ -n "$out" ] && printf '%s\\n' "$out"
exit $rc
"""
SUBMIT_GRACE = 8
# A fault of Slurm's or of files, whatever the database: on the one sites run.
ON_POSTGRESQL_ALONE = pytest.mark.parametrize("faulty", ["postgresql"], indirect=True)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def faulty(request, slurm_cluster):
    """A stack of its own (the faults must not reach the session's), with
    sbatch behind SBATCH_HOLD (sudo's place on its PATH) and a short grace for submits that never
    reached Slurm."""
    hold = service_folder("div-faults-bin-")
    (hold / "sudo").write_text(SBATCH_HOLD.replace("{sudo}", shutil.which("sudo")))
    (hold / "sudo").chmod(0o755)
    settings = {"PATH": f"{hold}:{VENV_BIN}:{os.environ['PATH']}",
                "DIV_SUBMIT_GRACE": str(SUBMIT_GRACE)}
    postgres = POSTGRES_URL if request.param == "postgresql" else None
    try:
        with running_stack(free_port(), postgres, "divergent_faults", settings) as stack:
            stack.hold = hold
            # The org's Slurm account is made by its first run, as on a site whose
            # orgs ran before slurmdbd failed (without slurmdbd it cannot be made).
            # In a turn of its own: a module's fixture is made before its
            # test's turn, and a test that has the cluster alone may have
            # made the service user no Operator meanwhile.
            with cluster_turn(DEV_STATE / "run", alone=False):
                warmed = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "true",
                                   cwd=stack.base)
            assert warmed.returncode == 0, warmed.stderr
            yield stack
    finally:
        shutil.rmtree(hold, ignore_errors=True)


@pytest.fixture
def code(tmp_path) -> Path:
    folder = tmp_path / "faulty-project"
    folder.mkdir()
    return folder


# --- the parts we break -------------------------------------------------

def _descendants(pid: int) -> list[int]:
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                              text=True).stdout.split()
    return [int(c) for child in children for c in (child, *_descendants(int(child)))]


def kill_server(stack: Stack) -> None:
    """SIGKILL for the server and everything it started (a held sbatch too),
    as a crash of its machine would."""
    master = int((stack.base / "pids" / "server.pid").read_text())
    for pid in [master, *_descendants(master)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait(lambda: not process_alive(master), 10, "the server did not die")


def _unnamed_upload_bytes(stack: Stack, volume: Path) -> int:
    """What the server has written of uploads into `volume` so far: they are
    unnamed files (O_TMPFILE) until whole, seen only among its open files."""
    master = int((stack.base / "pids" / "server.pid").read_text())
    written = 0
    for pid in [master, *_descendants(master)]:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(FileNotFoundError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(f"{volume}/") and target.endswith(" (deleted)"):
                        written += os.stat(f"/proc/{pid}/fd/{fd}").st_size
    return written


def _wait(condition, timeout: float, message: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(message)


def stop_daemon(name: str) -> None:
    """Stops one of the dev cluster's daemons (slurm/dev/up starts it again)."""
    pid = int((DEV_STATE / "run" / f"{name}.up.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    _wait(lambda: not process_alive(pid), 60, f"{name} did not stop")


def start_daemons() -> None:
    subprocess.run([str(ROOT / "slurm/dev/up")], check=True, capture_output=True)


def charges_reconcile(stack: Stack) -> str:
    """`flask charges`: every ended run billed exactly what sacct says."""
    done = stack.flask("charges", check=False)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("difference $0.00"), \
        done.stdout + done.stderr
    return done.stdout


def detached(stack: Stack, code: Path, *args: str) -> str:
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "-d", *args, cwd=code)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().strip()


def followed(stack: Stack, code: Path, name: str) -> subprocess.CompletedProcess:
    return stack.div("logs", name, "-f", cwd=code, timeout=180)


def last_line(done: subprocess.CompletedProcess) -> str:
    return done.stderr.decode().rstrip("\n").rsplit("\n", 1)[-1]


def squeue_ids(name: str) -> list[str]:
    return subprocess.run(["squeue", "--noheader", "--states=all", f"--name=div-{name}",
                           "--format=%i"], capture_output=True, text=True).stdout.split()


# --- submits ------------------------------------------------------------

def test_a_refused_run_is_not_kept_and_its_name_is_free(faulty, code):
    # Five nodes of H200s on a cluster of four.
    checked = faulty.div("run", "--gpu", "h200", "--gpus", "40", "--no-upload",
                         "--name", "too-big", "--", "true", cwd=code)
    assert checked.returncode == 2
    assert last_line(checked) == ("the cluster has 32 H200 on 4 nodes: --gpu h200 --gpus 40 asks "
                                  "for more (Slurm: Node count specification invalid)")
    # The same refusal at submit, for a client that skips the check.
    refused = faulty.api("POST", "/runs", json={"project": "p", "command": "true", "gpu": "h200",
                                                "gpus": 40, "name": "too-big"})
    assert refused.status_code == 422, refused.text
    assert faulty.api("GET", "/runs/too-big").status_code == 404
    again = faulty.div("run", "--gpu", "cpu", "--no-upload", "--name", "too-big", "--", "true",
                       cwd=code)
    assert again.returncode == 0, again.stderr


def test_a_retried_submit_with_its_idempotency_key_gets_the_same_run(faulty):
    body = {"project": "p", "command": "true", "gpu": "cpu"}
    key = {"Idempotency-Key": "retry-" + os.urandom(8).hex()}
    first = faulty.api("POST", "/runs", json=body, headers=key)
    again = faulty.api("POST", "/runs", json=body, headers=key)
    assert (first.status_code, again.status_code) == (201, 200), again.text
    assert again.json()["run"]["name"] == first.json()["run"]["name"]
    # Keys are the org's own: another org's same key makes its own run.
    theirs = faulty.api("POST", "/runs", org="other", json=body, headers=key)
    assert theirs.status_code == 201 and theirs.json()["run"]["name"] != ""
    bad = faulty.api("POST", "/runs", json=body, headers={"Idempotency-Key": "x; rm -rf /"})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]


def test_a_server_killed_after_sbatch_leaves_a_job_the_reconciler_adopts(faulty, code):
    (faulty.hold / "hold-after").touch()
    earlier = set(squeue_ids("adopt-me"))   # the other database's stack ran it too
    user = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload",
                             "--name", "adopt-me", "--", "sleep 2; echo all of it"],
                            cwd=code, env=faulty.div_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        job = _wait(lambda: [j for j in squeue_ids("adopt-me") if j not in earlier], 30,
                    "sbatch did not run")[0]
        kill_server(faulty)
    finally:
        (faulty.hold / "hold-after").unlink()
    faulty.services("start", "server")
    # div run tried again with its Idempotency-Key: the run it had made,
    # followed to its end as if nothing had happened.
    out, err = user.communicate(timeout=120)
    assert (user.returncode, out) == (0, b"all of it\n"), err
    run = faulty.run_json("adopt-me")
    assert run["status"] == "succeeded"
    assert run["slurm_job_id"] == job and run["cost"] != "0.00"
    logs = followed(faulty, code, "adopt-me")
    assert (logs.returncode, logs.stdout) == (0, b"all of it\n")
    charges_reconcile(faulty)


def test_a_server_killed_before_sbatch_leaves_a_run_settled_as_never_submitted(faulty, code):
    (faulty.hold / "hold-before").touch()
    user = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload",
                             "--name", "never-sent", "--", "true"],
                            cwd=code, env=faulty.div_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _wait(lambda: faulty.api("GET", "/runs/never-sent").status_code == 200, 30,
              "the run was not recorded")
        kill_server(faulty)
    finally:
        (faulty.hold / "hold-before").unlink()
    faulty.services("start", "server")
    ended = time.monotonic()
    run = faulty.wait_for_status("never-sent", "failed", timeout=SUBMIT_GRACE + 30)
    assert time.monotonic() - ended < SUBMIT_GRACE + 10
    assert (run["slurm_job_id"], run["cost"], run["started_at"]) == (None, "0.00", None)
    _, err = user.communicate(timeout=60)   # it got its run back and followed it to its end
    assert user.returncode == 1 and err.decode().rstrip().endswith(
        "never-sent failed before it started: Slurm never got it, and spent $0.00"), err
    logs = followed(faulty, code, "never-sent")
    assert logs.returncode == 1
    assert last_line(logs) == ("never-sent failed before it started: Slurm never got it, "
                               "and spent $0.00")
    assert squeue_ids("never-sent") == []
    # div stop on a run without a job (stopped while its submit hangs).
    (faulty.hold / "hold-before").touch()
    try:
        user = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload",
                                 "--name", "stop-me-early", "--", "true"], cwd=code,
                                env=faulty.div_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        _wait(lambda: faulty.api("GET", "/runs/stop-me-early").status_code == 200, 30,
              "the run was not recorded")
        stopped = faulty.div("stop", "stop-me-early", cwd=code)
        assert stopped.returncode == 0, stopped.stderr
        assert faulty.run_json("stop-me-early")["status"] == "canceled"
    finally:
        (faulty.hold / "hold-before").unlink()
    _, err = user.communicate(timeout=90)
    # Its submit went on and made a job: the job is canceled, and so said.
    assert user.returncode == 1 and b"canceled before Slurm took it" in err, err
    _wait(lambda: all(state in ("CANCELLED", "") for state in subprocess.run(
        ["squeue", "--noheader", "--states=all", "--name=div-stop-me-early", "--format=%T"],
        capture_output=True, text=True).stdout.split()), 30, "its job was not canceled")


# --- Slurm's daemons ----------------------------------------------------

def _schedule(stack: Stack, name: str) -> dict:
    return next(row for row in stack.api("GET", "/schedules").json()["schedules"]
                if row["name"] == name)


def _schedule_due_now(stack: Stack, name: str) -> None:
    """The schedule comes due now, as the clock would make it."""
    engine = sa.create_engine(stack.database_url)
    with engine.begin() as db:
        db.execute(sa.text("UPDATE schedule SET next_at = :now WHERE name = :name"),
                   {"now": datetime.now(UTC), "name": name})
    engine.dispose()


@ON_POSTGRESQL_ALONE
@pytest.mark.cluster_wide   # stops slurmctld
def test_slurmctld_down_refuses_new_runs_and_loses_nothing_of_live_ones(faulty, code, tmp_path):
    """One outage of the controller, every promise made about it asked at
    once (each waits out Slurm's own retries, about 9 s a command): a new
    run is not taken and its name stays free, the doctor says what is
    wrong, pyslurm's submit is judged as sbatch's answer, a schedule that
    comes due is tried again; live runs end unseen and settle once it is
    back, the schedule starts one run."""
    names = [detached(faulty, code, "--", f"echo started; sleep 6; echo run {i} ended")
             for i in range(2)]
    # Their commands run (a job whose step the controller has not made yet
    # fails to launch without it: Slurm's failure, not one of ours).
    _wait(lambda: all((faulty.data_dir / "runs" / "e2e" / n / "stdout").exists() and
                      (faulty.data_dir / "runs" / "e2e" / n / "stdout").read_bytes() and
                      faulty.run_json(n)["status"] == "running" for n in names), 30,
          "the runs did not start")
    (code / "eval.py").write_text("print('evaluated')\n")
    made = faulty.div("schedule", "create", "--cron", "0 3 * * *", "--name", "through-outage",
                      "--", "--gpu", "cpu", "eval.py", cwd=code)
    assert made.returncode == 0, made.stderr
    stop_daemon("slurmctld")
    stopped = time.monotonic()
    try:
        _schedule_due_now(faulty, "through-outage")
        script = render_batch_script(spec_for([tmp_path / d for d in ("state", "org", "code")],
                                              "true"), SITE)
        with ThreadPoolExecutor() as asking:
            down = asking.submit(faulty.div, "run", "--gpu", "cpu", "--no-upload", "--name",
                                 "ctl-down", "--", "true", cwd=code)
            sick = asking.submit(faulty.flask, "doctor", check=False)
            submitted = asking.submit(PyslurmClient().submit, script)
        down, sick = down.result(), sick.result()
        # A run asked for now is not refused: the service is unavailable (503).
        assert down.returncode == 1
        assert last_line(down).startswith("Slurm did not take the run: Slurm's controller "
                                          "does not answer (")
        assert "nothing was started, try again" in down.stderr.decode()
        assert sick.returncode == 1 and "problems found" in sick.stderr
        lines = sick.stdout.splitlines()
        assert lines[1].startswith("ok  database")
        assert "BAD Slurm: Slurm's controller does not answer through this host" in lines[2]
        assert "slurmctld running" in lines[2]
        assert lines[3] == "BAD accounting: not checked: Slurm does not answer"
        with pytest.raises(SubmitNotReceived, match="^Slurm's controller does not answer \\("):
            submitted.result()
        # The due schedule started nothing, said so, and tries again.
        row = _wait(lambda: _schedule(faulty, "through-outage")["last_error"] and
                    _schedule(faulty, "through-outage"), 30, "the schedule did not fire")
        assert "trying again at" in row["last_error"] and row["last_run"] is None, row
        time.sleep(max(0.0, stopped + 8 - time.monotonic()))   # the runs end unseen
        # Nothing marked wrongly (one may have ended before the controller went).
        assert {faulty.run_json(n)["status"] for n in names} <= {"running", "succeeded"}
    finally:
        start_daemons()
    back = time.monotonic()
    for i, name in enumerate(names):
        logs = followed(faulty, code, name)
        assert (logs.returncode, logs.stdout) == (0, f"started\nrun {i} ended\n".encode())
    recovered = time.monotonic() - back
    assert recovered < 30, recovered
    assert faulty.api("GET", "/runs/ctl-down").status_code == 404   # its name is free
    # Tried again half a minute after it failed, it starts one run, and the
    # schedule is due next at 03:00 again.
    row = _wait(lambda: _schedule(faulty, "through-outage")["last_run"] and
                _schedule(faulty, "through-outage"), 60, "the schedule did not start its run")
    assert faulty.wait_for_status(row["last_run"], "succeeded", timeout=60)["status"] == \
        "succeeded"
    runs = [r for r in faulty.api("GET", "/runs", params={"limit": 50}).json()["runs"]
            if r["schedule"] == "through-outage"]
    assert len(runs) == 1 and row["next_at"].endswith("T03:00:00Z"), (runs, row)
    assert faulty.div("schedule", "rm", "through-outage", cwd=code).returncode == 0
    charges_reconcile(faulty)


@ON_POSTGRESQL_ALONE
@pytest.mark.cluster_wide   # stops slurmdbd
def test_slurmdbd_down_runs_are_followed_from_squeue_and_settle_once_it_is_back(faulty, code):
    stop_daemon("slurmdbd")
    try:
        names = [detached(faulty, code, "--", "sleep 4; exit 3") for _ in range(2)]
        # squeue alone still says they run: never queued all along.
        _wait(lambda: all(faulty.run_json(n)["status"] == "running" for n in names), 30,
              "runs did not show running while slurmdbd was down")
        _wait(lambda: all(s == "COMPLETED" or s == "FAILED" for s in subprocess.run(
            ["squeue", "--noheader", "--states=all", "--format=%T",
             "--name=" + ",".join(f"div-{n}" for n in names)],
            capture_output=True, text=True).stdout.split()), 30, "the jobs did not end")
        time.sleep(2)
        # Ended in Slurm, with no final record to settle them from: still running.
        assert [faulty.run_json(n)["status"] for n in names] == ["running", "running"]
    finally:
        start_daemons()
    for name in names:
        run = faulty.wait_for_status(name, "failed", timeout=60)
        assert run["exit_code"] == 3 and run["cost"] != "0.00"
    charges_reconcile(faulty)


def _node_state(node: str) -> str:
    return subprocess.run(["sinfo", "--noheader", "--nodes", node, "--format=%t"],
                          capture_output=True, text=True).stdout.strip()


def fail_node(node: str) -> None:
    """A node dies as in a power cut: every process in its network namespace
    (its slurmd, the job's steps, the run's own) stopped, then SIGKILLed. All
    are frozen first, so none runs on between two kills (a shell whose
    `sleep` died first would go on to its next command, as no node does)."""
    def pids() -> set[int]:
        return {int(pid) for pid in subprocess.run(
            ["ip", "netns", "pids", f"div-{node}"], capture_output=True, text=True).stdout.split()}

    frozen: set[int] = set()
    while new := pids() - frozen:     # a process forked meanwhile is frozen too
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@ON_POSTGRESQL_ALONE
@pytest.mark.cluster_wide   # stops a node's slurmd
def test_a_node_that_fails_mid_run_restarts_it_elsewhere_billing_every_attempt(faulty, code):
    secret = faulty.div("secrets", "set", "RESTART_TOKEN", cwd=code, input=b"s3cr3t-value")
    assert secret.returncode == 0, secret.stderr
    # $0.05 at cpu's $0.30/h: ten minutes, over every attempt together.
    name = detached(faulty, code, "--max-spend", "0.05", "--secret", "RESTART_TOKEN", "--",
                    'echo "attempt $DIV_RESTART_COUNT on $(hostname) with ${#RESTART_TOKEN}"; '
                    '[ "$DIV_RESTART_COUNT" = 0 ] && sleep 300; echo resumed')
    faulty.wait_for_status(name, "running", timeout=30)
    state = faulty.data_dir / "runs" / "e2e" / name
    first = _wait(lambda: re.search(rb"attempt 0 on (node\d)", (state / "stdout").read_bytes()
                                    if (state / "stdout").exists() else b""), 30, "no attempt 0")
    failed_at, node = time.time(), first.group(1).decode()
    fail_node(node)
    try:
        timeline = {}
        for status in ("queued", "succeeded"):   # requeued, then its second attempt
            run = faulty.wait_for_status(name, status, timeout=90)
            assert run["status"] == status, run
            timeline[status] = round(time.time() - failed_at, 1)
        logs = followed(faulty, code, name)
    finally:
        start_daemons()
    assert logs.returncode == 0 and last_line(logs).startswith(f"{name} finished in ")
    other = re.search(r"attempt 1 on (node\d)", logs.stdout.decode()).group(1)
    assert other != node
    assert logs.stdout.decode() == (f"attempt 0 on {node} with 12\n"
                                    f"attempt 1 on {other} with 12\nresumed\n")
    assert (f"divergent: {name} restarted after a node failure: attempt 2 of at most 4, "
            f"on {other}") in logs.stderr.decode()
    run = faulty.run_json(name)
    assert (run["status"], run["restarts"], run["exit_code"]) == ("succeeded", 1, 0)
    assert not (state / "secrets.env").exists()
    attempts = subprocess.run(["sacct", "--noheader", "--parsable2", "--duplicates",
                               "--allocations", "-j", run["slurm_job_id"],
                               "--format=State,ElapsedRaw,Start"], capture_output=True,
                              text=True, env={**os.environ, "SLURM_TIME_FORMAT": "%s"})
    rows = [line.split("|") for line in attempts.stdout.split()]
    assert [state for state, _, _ in rows][-1] == "COMPLETED" and len(rows) == 2, rows
    timeline["started again"] = int(rows[1][2]) - round(failed_at)
    print(f"restart timeline after {node} failed (s): {timeline}")
    assert run["duration"] == sum(int(seconds) for _, seconds, _ in rows)
    # The second attempt had what the first left of the ten minutes.
    limit = subprocess.run(["scontrol", "show", "job", run["slurm_job_id"]],
                           capture_output=True, text=True).stdout
    assert f"TimeLimit=00:0{10 - -(-int(rows[0][1]) // 60)}:00" in limit, limit
    charges_reconcile(faulty)


def test_the_reconciler_killed_mid_cycle_charges_every_run_once(faulty, code):
    names = [detached(faulty, code, "--", "sleep 1") for _ in range(6)]
    log, pids = faulty.base / "pids" / "reconciler.log", faulty.base / "pids" / "reconciler.pid"
    seen = None
    for _ in range(2):
        if seen is not None:   # the new one acts once the killed one's lease runs out
            _wait(lambda since=seen: b"is acting" in log.read_bytes()[since:], 30, "it did not act")
        time.sleep(0.4)
        os.kill(int(pids.read_text()), signal.SIGKILL)
        seen = log.stat().st_size
        faulty.services("start", "reconciler")
    for name in names:
        run = faulty.wait_for_status(name, "succeeded", timeout=60)
        # One minute, the least a run is billed: once, however often it was settled.
        assert Decimal(run["cost"]) == Decimal(run["rate"]) / 60
    charges_reconcile(faulty)


# --- the server mid-transfer --------------------------------------------

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@ON_POSTGRESQL_ALONE
def test_a_server_killed_during_put_and_get_leaves_whole_files_only(faulty, code, tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(200 * 10**6))
    volume = faulty.data_dir / "share" / "e2e" / "faults"
    put = subprocess.Popen([str(VENV_BIN / "div"), "storage", "put", "faults", str(big)],
                           cwd=code, env=faulty.div_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    _wait(lambda: _unnamed_upload_bytes(faulty, volume) > 10**6, 30, "the upload did not start")
    kill_server(faulty)
    _, err = put.communicate(timeout=60)
    assert put.returncode == 1 and b"API" in err.splitlines()[-1], err
    assert not (volume / "big.bin").exists()       # nothing half-visible
    faulty.services("start", "server")
    again = faulty.div("storage", "put", "faults", str(big), cwd=code)
    assert again.returncode == 0, again.stderr
    assert _sha(volume / "big.bin") == _sha(big)

    into = tmp_path / "got"
    into.mkdir()
    get = subprocess.Popen([str(VENV_BIN / "div"), "storage", "get", "faults", "big.bin",
                            f"{into}/"], cwd=code, env=faulty.div_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    part = into / "big.bin.div-part"
    _wait(lambda: part.exists() and part.stat().st_size > 10**6, 30, "the download did not start")
    kill_server(faulty)
    _, err = get.communicate(timeout=60)
    assert get.returncode == 1, err
    assert not (into / "big.bin").exists()          # only the part, under its own name
    faulty.services("start", "server")
    resumed = faulty.div("storage", "get", "faults", "big.bin", f"{into}/", cwd=code)
    assert resumed.returncode == 0, resumed.stderr
    assert _sha(into / "big.bin") == _sha(big) and not part.exists()


# --- the database -------------------------------------------------------

def _database_down(stack: Stack):
    """The database unavailable: on PostgreSQL its connections refused (and
    the open ones ended), on SQLite its files made immutable (chattr +i)."""
    @contextlib.contextmanager
    def outage():
        if stack.database_url.startswith("sqlite"):
            files = [str(p) for p in stack.base.glob("divergent.db*")]
            subprocess.run(["chattr", "+i", *files], check=True)
            try:
                yield
            finally:
                subprocess.run(["chattr", "-i", *files], check=True)
            return
        admin = sa.create_engine(POSTGRES_URL.replace("postgresql://", "postgresql+psycopg://"),
                                 isolation_level="AUTOCOMMIT")
        name = stack.database_url.rsplit("/", 1)[1]
        with admin.connect() as conn:
            conn.execute(sa.text(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"))
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE datname = :name"), {"name": name})
        try:
            yield
        finally:
            with admin.connect() as conn:
                conn.execute(sa.text(f"ALTER DATABASE {name} WITH ALLOW_CONNECTIONS true"))
            admin.dispose()
    return outage()


def test_the_database_unavailable_is_a_503_and_everything_settles_after(faulty, code):
    name = detached(faulty, code, "--", "sleep 4; echo survived")
    faulty.wait_for_status(name, "running", timeout=30)
    reconciler = int((faulty.base / "pids" / "reconciler.pid").read_text())
    with _database_down(faulty):
        start = faulty.div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=code)
        assert start.returncode == 1
        assert last_line(start) == ("the database is not available right now; nothing was "
                                    "changed, try again in a moment")
        # A read goes on where the database still reads (SQLite), else is a 503.
        answer = faulty.api("GET", f"/runs/{name}")
        assert answer.status_code in (200, 503), answer.text
        if answer.status_code == 503:
            assert answer.headers["Retry-After"] == "5"
        time.sleep(6)   # the run ends in Slurm meanwhile
    back = time.monotonic()
    run = faulty.wait_for_status(name, "succeeded", timeout=60)
    assert time.monotonic() - back < 40
    assert process_alive(reconciler)                # it outlived the outage
    logs = followed(faulty, code, name)
    assert (logs.returncode, logs.stdout) == (0, b"survived\n")
    assert run["cost"] != "0.00"
    charges_reconcile(faulty)
