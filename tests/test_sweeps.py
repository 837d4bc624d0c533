"""Sweeps on the dev cluster: ONE Slurm job array, a run a member with its
values in its env and JSON, its own log and cost; the CLI's lines, summary
and exit code; sizes checked against MaxArraySize before any upload; a
member stopped while it waits; and a schedule that carries a sweep."""
from __future__ import annotations

import json
import subprocess

import sqlalchemy as sa

from tests.receivers import wait_for


def test_a_sweep_is_one_job_array_of_runs_each_with_its_values(stack, project):
    (project / "eval.py").write_text(
        "import json, os\n"
        "n = int(os.environ['N'])\n"
        "with open(os.environ['DIV_METRICS'], 'a') as f:\n"
        "    f.write(json.dumps({'score': n * 10, 'mode': 1}) + '\\n')\n"
        "print('n', n, os.environ['MODE'])\n")
    done = stack.div("run", "--gpu", "cpu", "--sweep", "N=1,2", "--sweep", "MODE=a,b'$(id)",
                     "--check", "metrics.score>=15", "--json", "--", "python3 eval.py",
                     cwd=project)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.decode().splitlines()
    assert lines[-1].startswith("sweep sweep-") and \
        lines[-1].endswith(": 4 of 4 runs succeeded, 2 passed all checks; cost $0.02")
    sweep = json.loads(done.stdout.decode()[done.stdout.decode().index("{"):])
    assert sweep["axes"] == {"N": ["1", "2"], "MODE": ["a", "b'$(id)"]}
    values = [run["sweep_values"] for run in sweep["runs"]]
    assert values == [{"N": "1", "MODE": "a"}, {"N": "1", "MODE": "b'$(id)"},
                      {"N": "2", "MODE": "a"}, {"N": "2", "MODE": "b'$(id)"}]
    # One submission: every member's job is a task of the sweep's array.
    assert [run["slurm_job_id"] for run in sweep["runs"]] == [
        f"{sweep['slurm_job_id']}_{i}" for i in range(4)]
    accounted = subprocess.run(["sacct", "-X", "--noheader", "--parsable2", "--format=JobID",
                                f"--jobs={sweep['slurm_job_id']}"], capture_output=True,
                               text=True).stdout.split()
    assert sorted(accounted) == sorted(run["slurm_job_id"] for run in sweep["runs"])
    for run in sweep["runs"]:
        log = stack.div("logs", run["name"], cwd=project).stdout.decode()
        assert log == f"n {run['sweep_values']['N']} {run['sweep_values']['MODE']}\n"
        assert run["env"] == run["sweep_values"] and run["cost"] == "0.005"
        assert run["checks"][0]["verdict"] == ("passed" if run["sweep_values"]["N"] == "2"
                                               else "failed")
    listed = stack.div("ls", "-n", "4", cwd=project).stdout.decode()
    assert listed.count(sweep["name"]) == 8      # each member's name and its SWEEP cell
    page = stack.dashboard_session("e2e-user", "sweep-test-password").get(
        f"{stack.url}/sweeps/{sweep['name']}").text
    assert page.count("<tr>") == 5 and "b&#39;$(id)" in page and "score" in page
    assert stack.api("GET", f"/sweeps/{sweep['name']}", org="other").status_code == 404


def test_the_first_failing_member_gives_the_exit_code(stack, project):
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--sweep", "N=1,2,3", "--",
                     "echo n=$N; exit $(( N == 1 ? 0 : N + 4 ))", cwd=project)
    assert done.returncode == 6, done.stderr
    out = done.stdout.decode().splitlines()
    assert sorted(line.split()[1] for line in out) == ["N=1", "N=2", "N=3"]
    assert any("failed (exit code 7)" in line for line in out)
    assert done.stderr.decode().splitlines()[-1].split(": ", 1)[1].startswith(
        "1 of 3 runs succeeded")


def test_sizes_past_max_array_size_are_refused_before_upload(stack, project):
    (project / "big.bin").write_bytes(b"x" * 1000)
    values = ",".join(str(n) for n in range(1002))
    done = stack.div("run", "--gpu", "cpu", "--sweep", f"N={values}", "--", "true",
                     cwd=project)
    assert done.returncode == 2
    assert "more than this cluster's MaxArraySize (1001)" in done.stderr.decode()
    assert "file" not in done.stderr.decode()           # nothing was uploaded
    bad = stack.div("run", "--gpu", "cpu", "--no-upload", "--sweep", "1X=a", "--", "true",
                    cwd=project)
    assert bad.returncode == 2 and "--sweep" in bad.stderr.decode()


def test_a_waiting_member_stopped_ends_canceled_and_costs_nothing(stack, project):
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--cpu", "64", "--sweep",
                     "N=1,2,3,4,5,6", "-d", "--json", "--", "sleep 30", cwd=project)
    assert done.returncode == 0, done.stderr
    sweep = json.loads(done.stdout)
    waiting = sweep["runs"][-1]["name"]
    stopped = stack.div("stop", waiting, cwd=project)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: stack.run_json(waiting)["status"] == "canceled", timeout=60)
    assert stack.run_json(waiting)["cost"] == "0.00"
    # The whole array canceled in Slurm: the members still waiting end at
    # once (squeue's word), not once squeue forgets them minutes later.
    subprocess.run(["scancel", sweep["slurm_job_id"]], check=True)
    wait_for(lambda: all(run["status"] == "canceled" for run in stack.api(
        "GET", f"/sweeps/{sweep['name']}").json()["sweep"]["runs"]), timeout=20)
    # Those that never got a node never started and cost nothing (squeue's
    # estimated start for them is no start).
    never = [run for run in stack.api("GET", f"/sweeps/{sweep['name']}").json()["sweep"]["runs"]
             if run["sweep_index"] == 4]
    assert [(run["started_at"], run["cost"]) for run in never] == [(None, "0.00")]


def test_a_schedule_carries_a_sweep(stack, project):
    made = stack.div("schedule", "create", "--cron", "0 3 * * *", "--tz", "Europe/Berlin",
                     "--name", "nightly-sweep", "--", "--gpu", "cpu", "--no-upload",
                     "--sweep", "SEED=1,2", "--", "echo seed=$SEED", cwd=project)
    assert made.returncode == 0, made.stderr
    assert "at 03:00 every day, Europe/Berlin; next " in made.stderr.decode()
    engine = sa.create_engine(stack.database_url.replace("postgresql://",
                                                         "postgresql+psycopg://"))
    with engine.begin() as connection:      # due now, as at 03:00 Berlin time
        connection.execute(sa.text("UPDATE schedule SET next_at = now() "
                                   "WHERE name = 'nightly-sweep'"))
    engine.dispose()

    def fired():
        return stack.api("GET", "/schedules").json()["schedules"][0]["last_run"]
    wait_for(fired, timeout=30)
    sweep = stack.api("GET", f"/sweeps/{fired()}").json()["sweep"]
    assert sweep["schedule"] == "nightly-sweep" and sweep["size"] == 2
    assert {run["schedule"] for run in sweep["runs"]} == {"nightly-sweep"}
    assert stack.div("schedule", "rm", "nightly-sweep", cwd=project).returncode == 0
