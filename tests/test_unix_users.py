"""Jobs under Unix users of their own, on the real cluster and server: a
run's job is its org's user (or a mapped member's), never the server's; a
run that escaped its sandbox, as that user, reaches its own org's files and
nothing of the server's or another org's; a fork bomb in one org starves no
one; a site moves from the server's user to org users losing nothing."""
from __future__ import annotations

import shlex
import subprocess
import time

from tests.sshd import free_port
from tests.stack import SERVICE_USER, WORKER, running_stack


def _sacct(job: str, *args: str) -> str:
    return subprocess.run(["sacct", "-n", "-X", "-P", *args, "-j", job], capture_output=True,
                          text=True, check=True).stdout.strip()


def _as(user: str, script: str) -> str:
    """What `script` prints run as `user` on this host: where a run that
    escaped its sandbox would be."""
    return subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                           "--", "bash", "-c", script], capture_output=True, text=True,
                          timeout=60).stdout


def _processes_of(user: str) -> int:
    return int(subprocess.run(["pgrep", "-c", "-u", user], capture_output=True,
                              text=True).stdout or 0)


def test_a_runs_job_is_its_orgs_user_and_an_escape_reaches_that_org_alone(stack, project):
    (project / "theirs.txt").write_text("other's data\n")
    assert stack.div("storage", "put", "other-secret", "theirs.txt", cwd=project,
                     org="other").returncode == 0
    theirs = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "other-log", "--",
                       "echo other-log-line", cwd=project, org="other")
    assert theirs.returncode == 0, theirs.stderr
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "whose-job", "--",
                     "id -un; echo mine > /mnt/escape-vol/mine.txt", cwd=project)
    assert (done.returncode, done.stdout) == (0, b"div-e2e\n"), done.stderr
    assert _sacct(stack.run_json("whose-job")["slurm_job_id"], "-o", "User") == "div-e2e"

    data, server_pid = stack.data_dir, (stack.base / "pids" / "server.pid").read_text().strip()
    server_files = [p for p in stack.instance.rglob("*") if p.is_file()]
    assert server_files            # the keys, the site's settings: something to protect
    probes = {
        "own volume": f"cat {data}/share/e2e/escape-vol/mine.txt",
        "server's instance": f"ls {stack.instance}",
        **{f"server's {p.name}": f"head -c1 {p}" for p in server_files},
        "other's volumes": f"ls {data}/share/other",
        "other's file": f"cat {data}/share/other/other-secret/theirs.txt",
        "other's log": f"cat {data}/runs/other/other-log/stdout",
        "other's code": f"ls {data}/trees/other",
        "own code, writing": f"touch {data}/trees/e2e/planted",
        "server's process": f"kill -0 {server_pid}",
    }
    script = "; ".join(f"{command} >/dev/null 2>&1 && echo {shlex.quote('reached: ' + what)}"
                       for what, command in probes.items())
    reached = _as("div-e2e", script).splitlines()
    assert reached == ["reached: own volume"]

    # Nor through the server: a log made a link to the server's key is
    # read as no log; a run's state folder moved away, or one planted (a
    # link, or a folder of the org's with a link in it) where a new run's
    # goes, is never followed when the server writes its batch script.
    secret_key = stack.instance / "secret_key"
    runs = data / "runs/e2e"
    canary = data / "share/other/other-secret/theirs.txt"
    _as("div-e2e", f"ln -sf {secret_key} {runs}/whose-job/stdout; "
                   f"mv {runs}/whose-job {runs}/moved-away; "
                   f"ln -s {data}/share/other/other-secret {runs}/planted-link; "
                   f"mkdir {runs}/planted-dir && ln -s {canary} {runs}/planted-dir/batch.sh")
    assert (runs / "whose-job").is_dir()                    # sticky: not moved away
    logs = stack.div("logs", "whose-job", cwd=project)
    assert logs.returncode == 0 and logs.stdout == b"", logs
    assert secret_key.read_bytes()[:8] not in logs.stdout + logs.stderr
    for name in ("planted-link", "planted-dir"):
        planted = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", name, "--", "true",
                            cwd=project)
        assert planted.returncode != 0 and b"something a run left is where" in planted.stderr, \
            planted.stderr
        assert stack.api("GET", f"/runs/{name}").status_code == 404       # not kept
    assert canary.read_text() == "other's data\n"
    assert not (data / "share/other/other-secret/batch.sh").exists()


def test_a_fork_bomb_in_one_org_leaves_the_server_and_other_orgs_starting_runs(stack, project):
    bomb = stack.div("run", "--gpu", "cpu", "-d", "--no-upload", "--name", "fork-bomb", "--",
                     "for i in $(seq 6000); do sleep 120 & done 2>/dev/null; wait",
                     cwd=project, org="other")
    assert bomb.returncode == 0, bomb.stderr
    try:
        deadline = time.monotonic() + 60
        while _processes_of("div-other") < 3000:
            assert time.monotonic() < deadline, "the bomb never went off"
            time.sleep(0.5)
        done = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "echo still starting",
                         cwd=project)
        assert (done.returncode, done.stdout) == (0, b"still starting\n"), done.stderr
        assert stack.api("GET", "/runs?limit=1").status_code == 200
        # The server's own count of processes (its RLIMIT_NPROC's) is its own.
        assert _processes_of(SERVICE_USER) < 500
    finally:
        stack.div("stop", "fork-bomb", cwd=project, org="other")


def test_members_mapped_to_their_own_unix_users_run_as_them_and_the_org_pays(stack, project):
    member = f"member-{WORKER}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", member],
                   capture_output=True)          # made before, by an earlier run: kept
    # The site's root lists the users divergent may act as.
    subprocess.run(["gpasswd", "-a", member, "div-members"], capture_output=True, check=True)
    stack.flask("create-user", "e2e", "e2e-mapped")
    key = stack.flask("create-key", "e2e-mapped").stdout.split()[-1]
    env = {**stack.div_env(), "DIV_TOKEN": key}
    try:
        stack.flask("user-unix-name", "e2e-mapped", member)
        stack.flask("site", "--submit-as", "member")
        theirs = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "as-member", "--",
                           "id -un", cwd=project, env=env)
        assert (theirs.returncode, theirs.stdout) == (0, f"{member}\n".encode()), theirs.stderr
        unmapped = stack.div("run", "--gpu", "cpu", "--no-upload", "--", "id -un", cwd=project)
        assert unmapped.stdout == b"div-e2e\n", unmapped.stderr
        doctor = stack.flask("doctor", check=False).stdout
        assert "ok  job users: " in doctor, doctor
    finally:
        stack.flask("site", "--submit-as", "org")
        stack.flask("user-unix-name", "e2e-mapped", "--none")
    # Unmapped, their own shell reaches the org's folders no more.
    assert "div-e2e" not in subprocess.run(["id", "-nG", member], capture_output=True,
                                           text=True).stdout.split()
    run = stack.run_json("as-member")
    # Slurm sees the member (fair share, sacct -u); the org's account is billed.
    mine = subprocess.run(["sacct", "-n", "-X", "-P", "-u", member, "-o", "JobID",
                           "-S", "now-1hour"], capture_output=True, text=True, check=True)
    assert run["slurm_job_id"] in mine.stdout.split()
    assert _sacct(run["slurm_job_id"], "-o", "Account") == stack.accounts["e2e"]
    assert run["cost"] != "0.00"


def test_a_site_moves_from_the_servers_user_to_org_users_and_loses_nothing(slurm_cluster,
                                                                          tmp_path):
    def as_the_server(stack):
        stack.flask("site", "--submit-as", "service")

    with running_stack(free_port(), None, before_start=as_the_server) as stack:
        old = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "before", "--",
                        "id -un; umask 077; echo old > /mnt/moving/old.txt", cwd=tmp_path)
        assert (old.returncode, old.stdout) == (0, f"{SERVICE_USER}\n".encode()), old.stderr
        live = stack.div("run", "--gpu", "cpu", "-d", "--no-upload", "--name", "live-through",
                         "--", "sleep 300", cwd=tmp_path)
        assert live.returncode == 0, live.stderr
        stack.wait_for_status("live-through", "running", timeout=60)

        moved = stack.flask("site", "--submit-as", "org")
        assert "e2e: its jobs run as div-e2e" in moved.stderr
        assert "other: its jobs run as div-other" in moved.stderr
        assert "runs that were live go on as the server's user until they end" in moved.stderr
        new = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "after", "--",
                        "id -un; cat /mnt/moving/old.txt; echo new > /mnt/moving/new.txt",
                        cwd=tmp_path)
        assert (new.returncode, new.stdout) == (0, b"div-e2e\nold\n"), new.stderr
        got = stack.div("storage", "get", "moving", "new.txt", cwd=tmp_path)
        assert (tmp_path / "new.txt").read_text() == "new\n", got.stderr
        # The run that was live is still the server's, and stops as it.
        stopped = stack.div("stop", "live-through", cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        stack.wait_for_status("live-through", "canceled", timeout=60)
        users = {name: _sacct(stack.run_json(name)["slurm_job_id"], "-o", "User")
                 for name in ("before", "live-through", "after")}
        assert users == {"before": SERVICE_USER, "live-through": SERVICE_USER, "after": "div-e2e"}
