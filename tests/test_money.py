"""Money, metrics and checks, end to end (docs/users/div-run.md: Size and
price, Checks, Output): spend limits enforced by Slurm, the org's
monthly limit, per-minute billing that reconciles with sacct, --check."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.cluster_turns import cluster_turn
from tests.conftest import DEV_STATE
from tests.stack import VENV_BIN


def last_line(done) -> str:
    return done.stderr.decode().splitlines()[-1]


# Catches the warning, saves a checkpoint to a volume, and waits to be ended.
WARNED = """\
import os, signal, time
deadline = int(os.environ["DIV_DEADLINE"])
def warned(signum, frame):
    with open("/mnt/warned-run/step.txt", "w") as f:
        f.write("step 7\\n")
    print(f"warned {deadline - time.time():.0f} s before the deadline", flush=True)
signal.signal(signal.SIGUSR1, warned)
while True:
    time.sleep(1)
"""


@pytest.fixture(scope="module")
def slow_runs(stack, tmp_path_factory):
    """The runs that wait for Slurm to end them at a one-minute --time, or
    run over a minute, all started when the module starts so that their
    minutes overlap; each test then asserts on its own. `div run` as a
    process each, as a user runs it."""
    with cluster_turn(DEV_STATE / "run", alone=False):     # the runs outlive each test
        yield from _slow_runs(stack, tmp_path_factory.mktemp("money"))


def _slow_runs(stack, code):
    stack.add_org("capped")
    # Room for one minute of L40S: --time is capped by the org's limit.
    stack.flask("org-limit", "capped", "0.06")

    def div_run(*args: str, org: str = "e2e") -> subprocess.Popen:
        return subprocess.Popen([str(VENV_BIN / "div"), "run", *args], cwd=code,
                                env=stack.div_env(org), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    (code / "warned.py").write_text(WARNED)
    made = stack.div("storage", "put", "warned-run", str(code / "warned.py"), cwd=code)
    assert made.returncode == 0, made.stderr
    # $0.05 at L40S's $2.55/h buys one minute (floor of 1.17); $0.01 at
    # cpu's $0.30/h two.
    running = {
        "warned": div_run("--gpu", "cpu", "--max-spend", "0.01", "--name", "warned",
                          "warned.py"),
        "over-budget": div_run("--gpu", "l40s", "--max-spend", "0.05", "--no-upload", "--name",
                               "over-budget", "--", "echo started; sleep 300"),
        "lim-capped": div_run("--gpu", "l40s", "--no-upload", "--name", "lim-capped", "--",
                              "sleep 300", org="capped"),
        **{f"bill-{s}": div_run("--gpu", "h100", "-d", "--no-upload", "--name", f"bill-{s}",
                                "--", f"sleep {s}") for s in (5, 65)}}
    yield running
    for proc in running.values():
        proc.kill()


def ended(proc: subprocess.Popen, timeout: float = 180):
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_spend_limit_stops_the_run_budget_exceeded(stack, slow_runs):
    done = ended(slow_runs["over-budget"])
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[0] == (
        "over-budget L40S $2.55/h max spend $0.05 (about 1m)")
    assert re.fullmatch(r"over-budget reached its spend limit of \$0\.05 after 1m \d+s",
                        last_line(done))
    run = stack.run_json("over-budget")
    # Billed one minute: Slurm's grace after --time is not the user's.
    assert (run["status"], run["cost"], run["time_limit_minutes"]) == ("budget_exceeded", "0.0425", 1)
    # slurmstepd's "*** JOB 87 ON node1 CANCELLED ... DUE TO TIME LIMIT ***"
    # is Slurm's, kept for admins beside the run, never in the run's log.
    logs = stack.div("logs", "over-budget", cwd=stack.base)
    assert (logs.stdout, b"slurmstepd" in logs.stderr) == (b"started\n", False)
    kept = (stack.data_dir / "runs" / "e2e" / "over-budget" / "slurm.log").read_text()
    assert "DUE TO TIME LIMIT" in kept


def test_a_run_is_warned_before_its_spend_limit_and_keeps_its_checkpoint(stack, slow_runs,
                                                                          tmp_path):
    done = ended(slow_runs["warned"])
    assert done.returncode == 1
    assert re.fullmatch(r"warned reached its spend limit of \$0\.01 after 2m \d+s",
                        last_line(done)), done.stderr
    # SIGUSR1 asked 45 s before the end; Slurm sends it up to 30 s earlier.
    lead = int(re.search(r"warned (\d+) s before the deadline", done.stdout.decode()).group(1))
    print(f"warned {lead} s before the deadline")
    assert 40 <= lead <= 80, done.stdout
    run = stack.run_json("warned")
    assert (run["status"], run["cost"], run["time_limit_minutes"]) == ("budget_exceeded", "0.01", 2)
    got = stack.div("storage", "get", "warned-run", "step.txt", str(tmp_path / "step.txt"),
                    cwd=tmp_path)
    assert got.returncode == 0 and (tmp_path / "step.txt").read_text() == "step 7\n", got.stderr


def test_a_run_over_its_memory_says_it_ran_out_of_memory_and_its_limit(stack, project):
    done = stack.div("run", "--gpu", "cpu", "--memory", "1", "--no-upload", "--name",
                     "too-hungry", "--", "python3 -c 'b = bytearray(3 << 30); b[::4096] = "
                     "b\"x\" * len(b[::4096])'", cwd=project, timeout=120)
    assert done.returncode == stack.run_json("too-hungry")["exit_code"] != 0   # Slurm's 9: the kill
    assert re.fullmatch(r"too-hungry ran out of memory \(1 GiB\) after \d+s and spent \$0\.\d+",
                        last_line(done)), done.stderr
    assert stack.run_json("too-hungry")["status"] == "failed"


def test_the_orgs_monthly_limit_caps_stops_and_refuses_runs(stack, project, slow_runs):
    stack.add_org("limited")
    stack.flask("org-limit", "limited", "10")
    proc = subprocess.Popen([str(VENV_BIN / "div"), "run", "--gpu", "cpu", "--no-upload",
                             "--name", "lim-running", "--", "echo started; sleep 300"],
                            cwd=project, env=stack.div_env("limited"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"started\n"
    # An admin lowers the limit below what the month has cost: the reconciler
    # stops the run, at the end of the minute it has paid for (not at once:
    # that minute is billed either way).
    stack.flask("org-limit", "limited", "0.001")
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 1
    assert re.fullmatch(r"lim-running reached the org's usage limit after 1m \d+s and spent "
                        r"\$0\.01", err.decode().splitlines()[-1]), err
    stopped = stack.run_json("lim-running", org="limited")
    assert (stopped["status"], stopped["cost"]) == ("limit_reached", "0.005")

    refused = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "true", cwd=project,
                        org="limited")
    assert refused.returncode == 1
    assert "the org's usage limit of $0.00 a month is reached" in refused.stderr.decode()

    usage = json.loads(stack.div("usage", "--json", cwd=project, org="limited").stdout)
    assert (usage["limit"], usage["spent"]) == ("0.001", "0.005")
    assert {g["gpu"]: g["cost"] for g in usage["gpus"]} == {"cpu": "0.005"}

    # A limit with room for one minute of L40S (org capped, slow_runs): --time
    # is capped, and the run that runs out of it ends limit_reached, not
    # budget_exceeded.
    capped = ended(slow_runs["lim-capped"])
    assert capped.stderr.decode().splitlines()[0] == (
        "lim-capped L40S $2.55/h no spend limit; the org's usage limit leaves about 1m")
    assert capped.returncode == 1
    assert stack.run_json("lim-capped", org="capped")["status"] == "limit_reached"
    usage = json.loads(stack.div("usage", "--json", cwd=project, org="capped").stdout)
    assert (usage["limit"], usage["spent"]) == ("0.06", "0.0425")
    assert {g["gpu"]: g["cost"] for g in usage["gpus"]} == {"l40s": "0.0425"}


def test_checks_get_verdicts_and_never_change_the_exit_code(stack, project):
    (project / "eval.py").write_text(
        "import json, os, sys\n"
        "with open(os.environ['DIV_METRICS'], 'a') as f:\n"
        "    for step in range(3):\n"
        "        f.write(json.dumps({'step': step, 'loss': 0.9 - step * 0.1,\n"
        "                            'accuracy': 0.6 + step * 0.1}) + '\\n')\n"
        "    f.write('{not json\\n')\n"
        "    f.write('[1, 2]\\n')\n"
        "sys.exit(int(sys.argv[1]))\n")
    checks = ["--check", "metrics.accuracy>=0.8", "--check", "metrics.loss<0.6",
              "--check", "metrics.f1>0.5", "--check", "exit_code==0"]
    done = stack.div("run", "--gpu", "cpu", "--json", *checks, "--", "python eval.py 0",
                     cwd=project)
    assert done.returncode == 0
    assert last_line(done).endswith(" · passed 2 of 4 checks (failed: metrics.loss<0.6 was 0.7; "
                                    "no value: metrics.f1>0.5)")
    run = json.loads(done.stdout)
    assert [(c["check"], c["verdict"], c["value"]) for c in run["checks"]] == [
        ("metrics.accuracy>=0.8", "passed", 0.8),
        ("metrics.loss<0.6", "failed", 0.7),
        ("metrics.f1>0.5", "unknown", None),
        ("exit_code==0", "passed", 0)]
    assert run["metrics"] == {"step": 2, "loss": 0.7, "accuracy": 0.8}
    assert (run["metrics_points"], run["metrics_malformed"]) == (3, 2)

    failing = stack.div("run", "--gpu", "cpu", *checks, "--", "python eval.py 3", cwd=project)
    assert failing.returncode == 3
    assert last_line(failing).endswith(
        "with exit code 3 and spent $0.01 · passed 1 of 4 checks (failed: metrics.loss<0.6 was "
        "0.7, exit_code==0 was 3; no value: metrics.f1>0.5)")


def test_prices_are_site_configuration_and_runs_keep_their_rate(stack, project):
    before = stack.div("run", "--gpu", "cpu", "-d", "--json", "--no-upload", "--", "true",
                       cwd=project)
    try:
        stack.flask("prices", "--set", "cpu=0.60", "--set", "extra_gib=0.05")
        after = stack.div("run", "--gpu", "cpu", "--memory", "4", "--max-spend", "0.07", "-d",
                          "--json", "--no-upload", "--", "true", cwd=project)
    finally:
        stack.flask("prices", "--set", "cpu=0.30", "--set", "extra_gib=0.03")
    started = json.loads(after.stdout)
    assert started["rate"] == "0.70"                 # $0.60 + 2 extra GiB x $0.05
    assert started["time_limit_minutes"] == 6        # $0.07 at $0.70/h
    assert stack.run_json(json.loads(before.stdout)["name"])["rate"] == "0.30"


def test_per_minute_billing_from_sacct_and_charges_reconcile_to_the_cent(stack, project,
                                                                        slow_runs):
    names = {}
    for seconds in (5, 65):
        done = ended(slow_runs[f"bill-{seconds}"])
        assert done.returncode == 0, done.stderr
        names[seconds] = f"bill-{seconds}"
    failed = stack.div("run", "--gpu", "h100", "--no-upload", "--", "exit 2", cwd=project)
    assert failed.returncode == 2
    runs = {s: stack.wait_for_status(name, "succeeded", timeout=150) for s, name in names.items()}
    for seconds, run in runs.items():
        sacct = subprocess.run(["sacct", "-n", "-X", "-P", "-j", run["slurm_job_id"],
                                "-o", "ElapsedRaw"], capture_output=True, text=True, check=True)
        elapsed = int(sacct.stdout.split()[0])
        assert run["duration"] == elapsed
        minutes = max(1, -(-elapsed // 60))
        assert minutes == (1 if seconds == 5 else 2)
        # $4.80/h is 80,000 micro-dollars a started minute.
        assert run["cost"] == {1: "0.08", 2: "0.16"}[minutes]
    # With the spend- and limit-stopped runs of the tests before: a mix.
    done = stack.flask("charges", check=False)
    assert done.returncode == 0, done.stdout
    assert re.search(r"\d+ runs, billed \$[\d.]+, difference \$0\.00$", done.stdout.strip())
