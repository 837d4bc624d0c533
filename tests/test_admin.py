"""The cluster admin's commands against the real server, database and
cluster: orgs, users and usage at a glance, the site's Slurm settings, the
SSH transport chosen by config, and the doctor, healthy and with a service
user that may not make accounts (with slurmctld stopped: test_faults)."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from divergent.slurm.client import SlurmClient
from divergent.slurm.pyslurm_client import INSTALL_HINT
from tests.stack import ROOT


def test_orgs_users_and_usage_at_a_glance(stack, project):
    # An org of its own: a limit on e2e would hold back the runs of the
    # tests beside this one in the worker's stack.
    stack.add_org("glance")
    done = stack.div("run", "--gpu", "cpu", "--no-upload", "--name", "admin-sees-me", "--",
                     "true", cwd=project, org="glance")
    assert done.returncode == 0, done.stderr
    stack.flask("org-limit", "glance", "500")
    orgs = stack.flask("orgs").stdout
    assert any(line.split()[:3] == ["glance", stack.accounts["glance"], "1"]
               and line.endswith("$500.00") for line in orgs.splitlines()), orgs
    users = stack.flask("users", "--org", "glance").stdout.splitlines()
    assert users[1].split()[:3] == ["glance-user", "glance", "member"] and len(users) == 2
    usage = stack.flask("usage").stdout
    assert "glance: $" in usage and "(limit $500.00)" in usage and project.name in usage


def test_the_site_maps_gpu_types_and_the_server_follows(stack, project):
    site_file = stack.private_folder("site-maps") / "site.toml"
    env = {"DIV_SITE_FILE": str(site_file)}
    bad = stack.flask("site", "--partition", "h100=no such", check=False, env=env)
    assert bad.returncode == 1 and "is not a Slurm name" in bad.stderr
    shown = stack.flask("site", "--partition", "h100=gpu-h100", "--gres", "h100=nvidia_h100",
                        "--runtime", "pyxis", env=env).stdout
    assert "h100   gpu-h100    nvidia_h100" in shown and "runtime        pyxis" in shown
    assert 'h100 = "gpu-h100"' in site_file.read_text()
    doctor = stack.flask("doctor", check=False, env=env)
    assert doctor.returncode == 1
    assert "BAD partitions and GPUs: no partition named gpu-h100" in doctor.stdout


def test_the_doctor_checks_the_ssh_transport_it_is_configured_with(stack, project, sshd):
    (stack.data_dir / "share").mkdir(exist_ok=True)     # as the first volume makes it
    site_file = stack.private_folder("site-ssh") / "site.toml"
    env = {"DIV_SITE_FILE": str(site_file)}
    stack.flask("site", "--transport", "ssh", "--ssh-host", sshd["host"], "--ssh-user",
                sshd["user"], "--ssh-key", sshd["key_path"], "--ssh-port", str(sshd["port"]),
                "--ssh-known-hosts", sshd["known_hosts"], env=env)
    healthy = stack.flask("doctor", check=False, env=env)
    assert healthy.returncode == 0, healthy.stdout
    assert f"ok  Slurm: Slurmctld(primary) at vm is UP (through ssh root@127.0.0.1:{sshd['port']})" \
        in healthy.stdout
    stack.flask("site", "--transport", "ssh", "--ssh-host", sshd["host"], "--ssh-user",
                sshd["user"], "--ssh-key", sshd["key_path"], "--ssh-port", "1", env=env)
    unreachable = stack.flask("doctor", check=False, env=env)
    assert unreachable.returncode == 1
    assert "BAD Slurm: Slurm's controller does not answer through ssh root@127.0.0.1:1" \
        in unreachable.stdout


def test_the_doctor_says_whether_pyslurm_imports_and_matches_the_cluster(stack, tmp_path):
    (stack.data_dir / "share").mkdir(exist_ok=True)
    env = {"DIV_SITE_FILE": str(stack.private_folder("site-pyslurm") / "site.toml")}
    stack.flask("site", "--transport", "pyslurm", env=env)
    healthy = stack.flask("doctor", check=False, env=env)
    assert healthy.returncode == 0, healthy.stdout
    assert "ok  Slurm: Slurmctld(primary) at vm is UP (through this host (pyslurm))" in healthy.stdout
    assert re.search(r"^ok  pyslurm: pyslurm 22\.5\.\d+ matches Slurm 22\.05\.\d+ \(in use\)$",
                     healthy.stdout, re.M), healthy.stdout
    # A pyslurm built for another Slurm, and one whose libslurm is gone.
    for name, source in (("other-release", '__version__ = "25.11.0"\n'),
                         ("no-libslurm", 'raise ImportError("libslurm.so.38: cannot open '
                                         'shared object file")\n')):
        module = stack.private_folder(name) / "pyslurm"
        module.mkdir()
        (module / "__init__.py").write_text(source)
        os.chmod(module / "__init__.py", 0o644)
        os.chmod(module, 0o755)
        sick = stack.flask("doctor", check=False, env={**env, "PYTHONPATH": str(module.parent)})
        assert sick.returncode == 1
        found = [line for line in sick.stdout.splitlines() if line.startswith("BAD pyslurm")]
        if name == "other-release":
            assert found == ["BAD pyslurm: pyslurm 25.11.0 is for Slurm 25.11, the cluster runs "
                             f"{SlurmClient().version()}: {INSTALL_HINT}"]
        else:
            assert found == ["BAD pyslurm: pyslurm does not import (libslurm.so.38: cannot open "
                             "shared object file): " + INSTALL_HINT]
            assert "BAD Slurm: pyslurm does not import" in sick.stdout
    # A site that does not use it is not sick for want of it.
    unused = stack.flask("doctor", check=False, env={"PYTHONPATH": str(module.parent)})
    assert "ok  pyslurm: not installed (the site does not use it; `make pyslurm` to try it)" \
        in unused.stdout


def test_a_run_goes_through_pyslurm_when_the_site_chooses_it(stack, project):
    """Nothing else changes: submitted, followed, ended and billed through
    pyslurm by the same server and reconciler."""
    stack.flask("site", "--transport", "pyslurm")
    try:
        (project / "hello.py").write_text("import sys\nprint('through pyslurm')\n"
                                          "print('to stderr', file=sys.stderr)\nsys.exit(4)\n")
        done = stack.div("run", "--gpu", "h100", "--name", "via-pyslurm", "--json", "--",
                         "python", "hello.py", cwd=project)
        assert done.returncode == 4, done.stderr
        # With --json, stdout is the run's JSON alone; its output is on stderr
        # (each stream's lines in order; the two streams as the run wrote them).
        assert "through pyslurm\n" in done.stderr.decode()
        assert "to stderr\n" in done.stderr.decode()
        run = json.loads(done.stdout)
        assert (run["status"], run["exit_code"], run["gpu"]) == ("failed", 4, "h100")
        assert float(run["cost"]) > 0
    finally:
        stack.flask("site", "--transport", "local")


@pytest.mark.cluster_wide   # changes the service user's AdminLevel
def test_the_doctor_reports_a_service_user_that_may_not_make_accounts(stack):
    """Healthy, then with the service user no Slurm Operator. (The doctor
    with slurmctld stopped: test_faults' controller outage.)"""
    (stack.data_dir / "share").mkdir(exist_ok=True)     # as the first volume makes it
    healthy = stack.flask("doctor", check=False)
    assert healthy.returncode == 0, healthy.stdout
    assert "ok  reconciler: running" in healthy.stdout
    assert "ok  accounts: divergent makes each org's account (AdminLevel Operator)" in \
        healthy.stdout
    # A service user that may not make accounts, on a site that wants them made.
    operator = ["sacctmgr", "-i", "modify", "user", "divergent", "set"]
    subprocess.run([*operator, "AdminLevel=None"], check=True, capture_output=True)
    try:
        refused = stack.flask("doctor", check=False).stdout
        assert ("BAD accounts: divergent is not a Slurm Operator (AdminLevel None), so it cannot "
                "make each org's account") in refused, refused
    finally:
        subprocess.run([*operator, "AdminLevel=Operator"], check=True, capture_output=True)


def test_an_admin_command_without_the_sites_settings_says_so_and_makes_no_database(stack):
    missing = stack.base / "nowhere" / "divergent.db"
    done = stack.flask("orgs", check=False, env={"DATABASE_URL": f"sqlite:///{missing}"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"Error: there is no database at {missing}: are the site's settings loaded? "
        "scripts/services reads them from services.env in the checkout (docs/admins/login-node.md); "
        "a new site makes its tables with `flask db upgrade`")
    assert not missing.exists()


def test_admin_commands_read_the_sites_env_file_and_only_a_safe_one(stack, tmp_path):
    """scripts/services reads the site's settings from its env file (a login
    node links services.env to /etc/divergent/divergent.env): an admin
    command finds the site's database without them in its environment."""
    env_file = tmp_path / "divergent.env"
    env_file.write_text(f"# the site's\nDATABASE_URL={stack.database_url}\n")
    env_file.chmod(0o640)
    env = {k: v for k, v in stack.env().items() if k != "DATABASE_URL"}
    command = [str(ROOT / "scripts/services"), "exec", str(ROOT / ".venv/bin/flask"), "orgs"]
    listed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                            env={**env, "DIV_ENV_FILE": str(env_file)})
    assert listed.returncode == 0 and "\ne2e " in listed.stdout, listed.stderr
    env_file.chmod(0o666)          # anyone could change what root acts on
    refused = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                             env={**env, "DIV_ENV_FILE": str(env_file)})
    assert refused.returncode == 1
    assert refused.stderr.strip() == (f"scripts/services: {env_file} must be root's (or yours) "
                                      "and writable by no one else")


def test_workers_and_threads_come_from_the_sites_settings_alone(slurm_cluster):
    """DIV_WORKERS and DIV_THREADS, read by app/web/gunicorn_conf.py for
    scripts/services and the systemd unit alike (the unit once hard-coded
    4 x 128 while the env file said otherwise)."""
    from tests.sshd import free_port
    from tests.stack import running_stack
    with running_stack(free_port(), None, settings={"DIV_WORKERS": "3",
                                                    "DIV_THREADS": "8"}) as sized:
        master = int((sized.base / "pids" / "server.pid").read_text())
        workers = subprocess.run(["pgrep", "-P", str(master)], capture_output=True,
                                 text=True).stdout.split()
        assert len(workers) == 3, workers
    unit = (ROOT / "deploy/systemd/divergent-server.service").read_text()
    assert "--workers" not in unit and "--threads" not in unit
